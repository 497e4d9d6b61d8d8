package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4" // what the kube-apiserver applies a webhook's patch with
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// review posts an AdmissionReview of pod to the handler and returns the answer.
func review(t *testing.T, h http.Handler, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	in := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID("uid-1"), Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw}}}
	body, err := json.Marshal(in)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.NotNil(t, out.Response)
	assert.Equal(t, types.UID("uid-1"), out.Response.UID, "the answer names its request")
	assert.Nil(t, out.Request, "the request is not sent back")
	return out.Response
}

// patched applies the answer's JSON patch to pod as the kube-apiserver does.
func patched(t *testing.T, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	require.NotNil(t, resp.PatchType)
	require.Equal(t, admissionv1.PatchTypeJSONPatch, *resp.PatchType)
	p, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err, "%s", resp.Patch)
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	raw, err = p.Apply(raw)
	require.NoError(t, err, "%s", resp.Patch)
	var out corev1.Pod
	require.NoError(t, json.Unmarshal(raw, &out))
	return &out
}

func webhookPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "ds-", Namespace: "ns", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"a": "b"},
			Volumes:      []corev1.Volume{{Name: "sys", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/sys"}}}},
			Containers: []corev1.Container{{Name: "c", Image: "i", Args: []string{"run"},
				VolumeMounts: []corev1.VolumeMount{{Name: "sys", MountPath: "/sys"}}}},
		}}
}

// The mutator's change reaches the pod through the patch, whole: fields changed, added and removed,
// the pod marked; what it left alone stays.
func TestWebhookPatchesWhatTheMutatorChanged(t *testing.T) {
	var want *corev1.Pod
	h := webhookHandler("sim", func(p *corev1.Pod) (bool, error) {
		p.Spec.Volumes[0].HostPath.Path = "/tmp/tree/sys"
		p.Spec.Containers[0].VolumeMounts[0].MountPath = "/tmp/tree/sys"
		p.Spec.Containers[0].Args = append(p.Spec.Containers[0].Args, "--sysfs-root=/tmp/tree/sys")
		p.Spec.NodeSelector = nil
		p.Spec.HostPID = true
		want = p.DeepCopy()
		return true, nil
	}, t.Logf)
	pod := webhookPod()
	resp := review(t, h, pod)
	require.True(t, resp.Allowed, "%+v", resp.Result)
	got := patched(t, pod, resp)
	want.Annotations = map[string]string{WebhookAdmittedAnnotation: "sim"}
	assert.Equal(t, want, got)

	unchanged := review(t, webhookHandler("sim", func(*corev1.Pod) (bool, error) { return false, nil }, t.Logf), pod)
	assert.True(t, unchanged.Allowed)
	assert.Empty(t, unchanged.Patch, "nothing changed: no patch, no mark")
}

// A pod the mutator refuses is refused by admission (with its reason), never created unchanged.
func TestWebhookRefusesWhatTheMutatorCannotPlace(t *testing.T) {
	h := webhookHandler("sim", func(*corev1.Pod) (bool, error) { return false, errors.New("already has --sysfs-root") }, t.Logf)
	resp := review(t, h, webhookPod())
	assert.False(t, resp.Allowed)
	require.NotNil(t, resp.Result)
	assert.Contains(t, resp.Result.Message, "webhook sim: pod ns/ds-: already has --sysfs-root")
	assert.Empty(t, resp.Patch)
}

// The probe pod is only marked: the mutator never sees it.
func TestWebhookMarksItsProbe(t *testing.T) {
	h := webhookHandler("sim", func(*corev1.Pod) (bool, error) { panic("the probe reached the mutator") }, t.Logf)
	pod := webhookPod()
	pod.Labels[webhookProbeLabel] = "sim"
	resp := review(t, h, pod)
	require.True(t, resp.Allowed)
	assert.Equal(t, map[string]string{WebhookAdmittedAnnotation: "sim"}, patched(t, pod, resp).Annotations)
}

// What is no AdmissionReview is a bad request, not a crash or an allowed pod.
func TestWebhookRejectsGarbage(t *testing.T) {
	h := webhookHandler("sim", func(*corev1.Pod) (bool, error) { return true, nil }, t.Logf)
	for _, body := range []string{"", "{", `{"kind":"AdmissionReview"}`} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader([]byte(body))))
		assert.Equal(t, http.StatusBadRequest, rec.Code, "%q", body)
	}
}
