package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Pod mutators: a mutating admission webhook served by the test process for the cluster's
// kube-apiserver, which calls it (https://127.0.0.1:<port>, a serving certificate of the cluster's
// CA) for every Pod created in one namespace, before the Pod is stored. A harness changes what the
// pods of a namespace run with (the cluster suite's operands: the simulated host) without touching
// the objects that make them, such as an operator's DaemonSets.
const (
	// webhookProbeLabel marks the probe Pod ServePodMutator dry-runs in the default namespace until
	// the kube-apiserver calls the webhook; its value is the mutator's name.
	webhookProbeLabel = "test.sandbox-gpu.io/webhook-probe"
	// WebhookAdmittedAnnotation is set, to the mutator's name, on every Pod the mutator changed.
	WebhookAdmittedAnnotation = "test.sandbox-gpu.io/mutated-by"
	// webhookWithin bounds the wait for the kube-apiserver to call a new webhook.
	webhookWithin = time.Minute
	// maxReview bounds an AdmissionReview's body.
	maxReview = 8 << 20
)

// PodMutator changes a Pod being created; changed false leaves it as it is. An error refuses the
// Pod (with the error's text), so that a pod the mutator cannot handle never runs unchanged.
type PodMutator func(pod *corev1.Pod) (changed bool, err error)

// ServePodMutator serves mutate for the Pods created in namespace (which need not exist yet) and
// registers it with the kube-apiserver as the MutatingWebhookConfiguration name (failurePolicy
// Fail: a Pod the webhook does not answer for is refused, never created unchanged). It returns
// once the kube-apiserver calls the webhook (a dry-run probe Pod in the default namespace, polled).
// The server ends with Stop.
func (c *Cluster) ServePodMutator(ctx context.Context, name, namespace string, mutate PodMutator) error {
	if err := c.pki.issue(certOpts{file: "webhook-" + name, cn: name + ".webhook.sandbox-gpu-test", server: true,
		ips: []net.IP{net.IPv4(127, 0, 0, 1)}}); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.pki.path("webhook-"+name+".crt"), c.pki.path("webhook-"+name+".key"))
	if err != nil {
		return fmt.Errorf("webhook %s: serving certificate: %w", name, err)
	}
	caPEM, err := os.ReadFile(c.pki.caFile())
	if err != nil {
		return fmt.Errorf("webhook %s: %w", name, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("webhook %s: listen: %w", name, err)
	}
	srv := &http.Server{
		Handler:           webhookHandler(name, mutate, c.logf),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.logf("webhook %s: %v", name, err)
		}
	}()
	c.servers = append(c.servers, srv)

	url := "https://" + l.Addr().String() + "/mutate"
	hook := func(suffix string, namespaces []string, objects *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:         name + suffix + ".webhook.sandbox-gpu-test",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces}}},
			ObjectSelector:          objects,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook("", []string{namespace}, nil),
			// The probe: the same configuration, so live together with the webhook above.
			hook("-probe", []string{metav1.NamespaceDefault}, &metav1.LabelSelector{MatchLabels: map[string]string{webhookProbeLabel: name}}),
		}}
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("webhook %s: create MutatingWebhookConfiguration: %w", name, err)
	}
	return c.waitWebhook(ctx, name)
}

// waitWebhook dry-runs the probe Pod until the kube-apiserver hands it to the webhook (the
// configuration reaches its admission chain through an informer, moments after it is stored).
func (c *Cluster) waitWebhook(ctx context.Context, name string) error {
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe-" + name, Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{webhookProbeLabel: name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: BusyboxImage}}},
	}
	err := poll(ctx, webhookWithin, func(ctx context.Context) (bool, error) {
		got, err := c.Client.CoreV1().Pods(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, retryf("dry-run pod %s/%s: %w", probe.Namespace, probe.Name, err)
		}
		if got.Annotations[WebhookAdmittedAnnotation] != name {
			return false, retryf("pod %s/%s admitted without the webhook (annotations %v)", probe.Namespace, probe.Name, got.Annotations)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("webhook %s: the kube-apiserver does not call it: %w", name, err)
	}
	c.logf("webhook %s: called by the kube-apiserver", name)
	return nil
}

// webhookHandler answers AdmissionReviews: the probe Pod is only marked; any other Pod goes to
// mutate, and a change comes back as a JSON patch, the Pod marked WebhookAdmittedAnnotation.
func webhookHandler(name string, mutate PodMutator, logf func(string, ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReview))
		if err == nil {
			err = json.Unmarshal(body, &review)
		}
		if err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("webhook %s: not an AdmissionReview request: %v", name, err), http.StatusBadRequest)
			return
		}
		review.Response = admitPod(name, review.Request, mutate)
		if !review.Response.Allowed {
			logf("webhook %s: refused pod %s/%s: %s", name, review.Request.Namespace, review.Request.Name, review.Response.Result.Message)
		}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(&review); err != nil {
			logf("webhook %s: answer: %v", name, err)
		}
	})
}

// admitPod is the webhook's answer to one request.
func admitPod(name string, req *admissionv1.AdmissionRequest, mutate PodMutator) *admissionv1.AdmissionResponse {
	refuse := func(err error) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{UID: req.UID, Result: &metav1.Status{Status: metav1.StatusFailure,
			Message: fmt.Sprintf("webhook %s: %v", name, err), Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden}}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return refuse(fmt.Errorf("decode pod %s/%s: %w", req.Namespace, req.Name, err))
	}
	after := pod.DeepCopy()
	changed := after.Labels[webhookProbeLabel] == name
	if !changed {
		var err error
		if changed, err = mutate(after); err != nil {
			return refuse(fmt.Errorf("pod %s/%s%s: %w", req.Namespace, pod.Name, pod.GenerateName, err))
		}
	}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if !changed {
		return resp
	}
	if after.Annotations == nil {
		after.Annotations = map[string]string{}
	}
	after.Annotations[WebhookAdmittedAnnotation] = name
	patch, err := podPatch(&pod, after)
	if err != nil {
		return refuse(err)
	}
	resp.Patch, resp.PatchType = patch, ptr.To(admissionv1.PatchTypeJSONPatch)
	return resp
}

// podPatch is the JSON patch (RFC 6902) from before to after: the annotations and labels, and each
// field of the spec that differs, replaced whole.
func podPatch(before, after *corev1.Pod) ([]byte, error) {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
	}
	var ops []op
	if !reflect.DeepEqual(before.Annotations, after.Annotations) {
		ops = append(ops, op{"add", "/metadata/annotations", after.Annotations})
	}
	if !reflect.DeepEqual(before.Labels, after.Labels) {
		ops = append(ops, op{"add", "/metadata/labels", after.Labels})
	}
	b, err := fields(before.Spec)
	if err != nil {
		return nil, err
	}
	a, err := fields(after.Spec)
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if !reflect.DeepEqual(b[k], a[k]) {
			ops = append(ops, op{"add", "/spec/" + k, a[k]})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			ops = append(ops, op{Op: "remove", Path: "/spec/" + k})
		}
	}
	return json.Marshal(ops)
}

// fields are the top-level fields of a pod's spec as JSON has them.
func fields(spec corev1.PodSpec) (map[string]any, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	return out, nil
}
