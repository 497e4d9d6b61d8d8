package cluster

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// CreateNamespace creates a namespace and waits until pods can be created in it (the controller
// manager made its default ServiceAccount and kube-root-ca.crt ConfigMap).
func (c *Cluster) CreateNamespace(ctx context.Context, name string, within time.Duration) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	err := poll(ctx, within, func(ctx context.Context) (bool, error) {
		if _, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, retryf("ServiceAccount %s/default: %w", name, err)
		}
		if _, err := c.Client.CoreV1().ConfigMaps(name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, retryf("ConfigMap %s/kube-root-ca.crt: %w", name, err)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s not ready for pods: %w", name, err)
	}
	return nil
}

// WaitForPod polls a pod until cond holds; the error carries the pod's last status (and events when
// it never ran).
func (c *Cluster) WaitForPod(ctx context.Context, namespace, name string, within time.Duration, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := poll(ctx, within, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, retryf("get pod: %w", err)
		}
		pod = p
		if cond(p) {
			return true, nil
		}
		return false, retryf("phase %s, conditions %s, containers %s", p.Status.Phase, podConditions(p), containerStates(p))
	})
	if err != nil {
		return pod, fmt.Errorf("pod %s/%s: %w%s", namespace, name, err, c.podEvents(namespace, name))
	}
	return pod, nil
}

// PodRunning holds when every container of the pod runs and is ready.
func PodRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			return false
		}
	}
	return true
}

// Exec runs a command in a pod's container through kube-apiserver and the kubelet (the path kubectl
// exec takes: WebSocket, falling back to SPDY) and returns its stdout and stderr.
func (c *Cluster) Exec(ctx context.Context, namespace, pod, container string, cmd ...string) (string, string, error) {
	req := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: container, Command: cmd, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.RESTConfig, "GET", req.URL().String())
	if err != nil {
		return "", "", fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.RESTConfig, "POST", req.URL())
	if err != nil {
		return "", "", fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", "", fmt.Errorf("exec in %s/%s: %w", namespace, pod, err)
	}
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return stdout.String(), stderr.String(), fmt.Errorf("exec %v in %s/%s: %w (stderr: %s)", cmd, namespace, pod, err, stderr.String())
	}
	return stdout.String(), stderr.String(), nil
}

// PodLogs returns a container's log through kube-apiserver and the kubelet.
func (c *Cluster) PodLogs(ctx context.Context, namespace, pod, container string) (string, error) {
	data, err := c.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s: %w", namespace, pod, err)
	}
	return string(data), nil
}

func podConditions(p *corev1.Pod) string {
	var s string
	for _, c := range p.Status.Conditions {
		s += fmt.Sprintf("%s=%s ", c.Type, c.Status)
	}
	return "[" + s + "]"
}

func containerStates(p *corev1.Pod) string {
	var s string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf("%s waiting (%s: %s) ", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf("%s terminated (%s, exit %d: %s) ", cs.Name, cs.State.Terminated.Reason,
				cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
		case cs.State.Running != nil:
			s += fmt.Sprintf("%s running (ready %v) ", cs.Name, cs.Ready)
		}
	}
	return "[" + s + "]"
}

// podEvents lists the events of a pod, for an error message.
func (c *Cluster) podEvents(namespace, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	events, err := c.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + name,
	})
	if err != nil || len(events.Items) == 0 {
		return ""
	}
	s := "\nevents:"
	for _, e := range events.Items {
		s += fmt.Sprintf("\n  %s %s: %s", e.Type, e.Reason, e.Message)
	}
	return s
}
