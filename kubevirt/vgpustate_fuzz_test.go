package kubevirt

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// FuzzTypeNames: whatever the vGPU device manager's report holds, the
// type names taken from it are of positive type ids, and each gives a
// resource name the kubelet accepts (a hostile or broken report must not
// make the plugin advertise what the kubelet refuses); written back as a
// report they read the same.
func FuzzTypeNames(f *testing.F) {
	f.Add([]byte(`{"config":"L40S-24Q","state":"success","gpus":[{"index":0,"typeIds":{"1155":"L40S-24Q"}}]}`))
	f.Add([]byte(`{"gpus":[{"typeIds":{"0":"x","-1":"y","a":"z","12":""}}]}`))
	f.Add([]byte(`{"gpus":[{"typeIds":{"7":"A10 4Q"}},{"typeIds":{"7":"A10-8Q"}}]}`))
	f.Add([]byte(`{"gpus":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		report, err := wire.ParseVGPUReady("report", data)
		if err != nil {
			return // a report that does not parse names nothing (TypeNames)
		}
		names := typeNames(report)
		for id, name := range names {
			short, ok := strings.CutPrefix(name, "NVIDIA ")
			if id <= 0 || !ok || short == "" {
				t.Fatalf("type %d named %q", id, name)
			}
			if errs := validation.IsQualifiedName(TypeResource(name)); len(errs) > 0 {
				t.Fatalf("type %d named %q gives the resource %q: %s", id, name, TypeResource(name), strings.Join(errs, "; "))
			}
		}
		ids := map[string]string{}
		for id, name := range names {
			ids[strconv.Itoa(id)] = strings.TrimPrefix(name, "NVIDIA ")
		}
		b, err := json.Marshal(map[string]any{"gpus": []any{map[string]any{"typeIds": ids}}})
		if err != nil {
			t.Fatal(err)
		}
		back, err := wire.ParseVGPUReady("written back", b)
		if err != nil {
			t.Fatal(err)
		}
		again := typeNames(back)
		if fmt.Sprint(again) != fmt.Sprint(names) {
			t.Fatalf("%q read %v, written back %v", data, names, again)
		}
	})
}
