package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadVGPUReady: any content of the vGPU device manager's ready file
// reads as a report or fails naming the file, never a panic; a report
// read and written back reads the same.
func FuzzReadVGPUReady(f *testing.F) {
	f.Add([]byte(`{"config":"A10-4Q","state":"success","gpus":[{"index":0,"address":"0000:3b:00.0","device":"2236","backend":"mdev","vgpus":{"A10-4Q":6}}],"refused":[]}`))
	f.Add([]byte(`{"config":"L40S-24Q","state":"failed","gpus":[{"index":0,"backend":"vendor-vfio","vgpus":{},"typeIds":{"1155":"L40S-24Q"}}],"refused":[{"gpu":0,"address":"0000:3b:00.0","reason":"in use: qemu"}],"error":"x"}`))
	f.Add([]byte(`{"gpus":[null]}`))
	f.Add([]byte(`nope`))
	path := filepath.Join(f.TempDir(), "vgpu-device-manager.ready")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := ReadVGPUReady(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		b1, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%q read but does not marshal: %v", data, err)
		}
		var r2 VGPUReady
		if err := json.Unmarshal(b1, &r2); err != nil {
			t.Fatalf("%s does not read back: %v", b1, err)
		}
		if b2, err := json.Marshal(r2); err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("not stable: %s then %s (%v)", b1, b2, err)
		}
	})
}
