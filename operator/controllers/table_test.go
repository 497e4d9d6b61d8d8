package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// tableAccept asks the API server for the table kubectl prints.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// getRaw GETs a path of the API server with an Accept header.
func getRaw(t *testing.T, path, accept string) []byte {
	t.Helper()
	cs, err := kubernetes.NewForConfig(testCfg)
	require.NoError(t, err)
	req := cs.Discovery().RESTClient().Get().AbsPath(path)
	if accept != "" {
		req = req.SetHeader("Accept", accept)
	}
	b, err := req.DoRaw(context.Background())
	require.NoError(t, err, "GET %s", path)
	return b
}

func getTable(t *testing.T, resource string) *metav1.Table {
	t.Helper()
	var table metav1.Table
	require.NoError(t, json.Unmarshal(getRaw(t, "/apis/sandbox-gpu.io/v1alpha1/"+resource, tableAccept), &table))
	require.Equal(t, "Table", table.Kind)
	return &table
}

type column struct {
	name, typ string
	priority  int32
}

func columns(table *metav1.Table) []column {
	var out []column
	for _, c := range table.ColumnDefinitions {
		out = append(out, column{c.Name, c.Type, c.Priority})
	}
	return out
}

// cell is a table cell as kubectl prints it (a missing value is blank).
func cell(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// cells is a table's rows by name, each cell as kubectl prints it.
func cells(table *metav1.Table) map[string][]string {
	out := map[string][]string{}
	for _, r := range table.Rows {
		var row []string
		for _, v := range r.Cells {
			row = append(row, cell(v))
		}
		out[row[0]] = row
	}
	return out
}

// kubectlGet renders tables of several kinds as `kubectl get <category>`
// prints them: per kind, a header of the column names in capitals, then a
// row per object named kind.group/name, a blank line between kinds. wide
// keeps the columns of priority > 0.
func kubectlGet(wide bool, kinds []string, tables []*metav1.Table) string {
	var b strings.Builder
	for i, table := range tables {
		if i > 0 {
			b.WriteString("\n")
		}
		w := tabwriter.NewWriter(&b, 6, 4, 3, ' ', 0) // kubectl's tab writer
		var keep []int
		var head []string
		for j, c := range table.ColumnDefinitions {
			if c.Priority == 0 || wide {
				keep = append(keep, j)
				head = append(head, strings.ToUpper(c.Name))
			}
		}
		fmt.Fprintln(w, strings.Join(head, "\t"))
		for _, r := range table.Rows {
			var row []string
			for _, j := range keep {
				v := cell(r.Cells[j])
				if j == 0 {
					v = kinds[i] + "/" + v
				}
				row = append(row, v)
			}
			fmt.Fprintln(w, strings.Join(row, "\t"))
		}
		_ = w.Flush()
	}
	return b.String()
}

// tableScenario: a ready vm-passthrough node with two GPUs on vfio, and a
// container node draining towards vm-vgpu.
func tableScenario(t *testing.T, c client.Client) {
	t.Helper()
	clearNodes(t, c)
	setPolicy(t, c, sandboxOn("container"))
	startOperator(t, newClock())
	newNode(t, c, "gpu-a10", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	setCapacity(t, c, "gpu-a10", map[string]int64{"nvidia.com/GA102GL_A10": 2})
	readyOperands(t, c, "gpu-a10", names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager)
	newNode(t, c, "gpu-l4", map[string]string{names.WorkloadConfigLabel: "container"})
	setCapacity(t, c, "gpu-l4", map[string]int64{"nvidia.com/gpu": 1})
	readyOperands(t, c, "gpu-l4", containerOps...)
	waitState(t, c, "gpu-l4", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
	gpuPod(t, c, "gpu-l4", "nvidia.com/gpu")
	setNodeLabel(t, c, "gpu-l4", names.WorkloadConfigLabel, "vm-vgpu")
	waitState(t, c, "gpu-l4", "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	waitState(t, c, "gpu-a10", "ready", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateReady && s.Status.GPUs == 2
	})
	// The policy's count is paced and read from the operator's cache: wait
	// for the one that saw both nodes as they are now, not an earlier one
	// (gpu-a10 still configuring) or one between (CI saw a count with
	// gpu-a10 ready and gpu-l4 not yet draining make the policy Ready).
	waitPolicyCondition(t, c, v1alpha1.ConditionReady, ReasonNodesNotReady, "1 of 2 GPU nodes is ready; not ready: gpu-l4 (draining).")

}

// What `kubectl get sandbox-gpu -o wide` shows, from the real API server's
// tables: the applied and desired config, AGE, MESSAGE only when wide; both
// kinds in the sandbox-gpu category, with their short names.
func TestKubectlTables(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	tableScenario(t, c)
	nodes := getTable(t, "sandboxgpunodes")
	assert.Equal(t, []column{{"Name", "string", 0}, {"Config", "string", 0}, {"Desired", "string", 0}, {"State", "string", 0},
		{"GPUs", "integer", 0}, {"VFIO", "integer", 0}, {"vGPUs", "integer", 0}, {"Age", "date", 0}, {"Message", "string", 1}}, columns(nodes))
	rows := cells(nodes)
	age := regexp.MustCompile(`^\d+s$`)
	require.Contains(t, rows, "gpu-a10")
	assert.Equal(t, []string{"gpu-a10", "vm-passthrough", "vm-passthrough", "ready", "2", "2", "0"}, rows["gpu-a10"][:7])
	assert.Regexp(t, age, rows["gpu-a10"][7])
	assert.Empty(t, rows["gpu-a10"][8], "a ready node has nothing to say")
	require.Contains(t, rows, "gpu-l4")
	assert.Equal(t, []string{"gpu-l4", "container", "vm-vgpu", "draining", "1", "0", "0"}, rows["gpu-l4"][:7], "CONFIG is what runs, DESIRED where it goes")
	assert.Equal(t, "Draining from container to vm-vgpu: waiting for 1 GPU pod to finish: default/train-gpu-l4.", rows["gpu-l4"][8])

	policies := getTable(t, "sandboxgpupolicies")
	assert.Equal(t, []column{{"Name", "string", 0}, {"Sandbox", "boolean", 0}, {"Mode", "string", 0}, {"Default", "string", 0},
		{"Ready", "string", 0}, {"Age", "date", 0}}, columns(policies))
	require.Contains(t, cells(policies), PolicyName)
	assert.Equal(t, []string{"default", "true", "kubevirt", "container", "False"}, cells(policies)[PolicyName][:5])

	// kubectl finds both kinds by the category and each by its short name
	// through discovery, which serves what the CRDs say.
	var resources metav1.APIResourceList
	require.NoError(t, json.Unmarshal(getRaw(t, "/apis/sandbox-gpu.io/v1alpha1", ""), &resources))
	found := map[string]metav1.APIResource{}
	for _, r := range resources.APIResources {
		found[r.Name] = r
	}
	for res, short := range map[string]string{"sandboxgpunodes": "sgnode", "sandboxgpupolicies": "sgpol"} {
		assert.Equal(t, []string{"sandbox-gpu"}, found[res].Categories, res)
		assert.Equal(t, []string{short}, found[res].ShortNames, res)
	}
	crd := &unstructured.Unstructured{}
	require.NoError(t, json.Unmarshal(getRaw(t, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sandboxgpunodes.sandbox-gpu.io", ""), &crd.Object))
	categories, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "categories")
	assert.Equal(t, []string{"sandbox-gpu"}, categories)

	kinds := []string{"sandboxgpunode.sandbox-gpu.io", "sandboxgpupolicy.sandbox-gpu.io"}
	wide := kubectlGet(true, kinds, []*metav1.Table{nodes, policies})
	narrow := kubectlGet(false, kinds, []*metav1.Table{nodes, policies})
	assert.Contains(t, wide, "MESSAGE")
	assert.NotContains(t, narrow, "MESSAGE", "MESSAGE is wide only")
	assert.Regexp(t, `(?m)^sandboxgpunode\.sandbox-gpu\.io/gpu-l4 +container +vm-vgpu +draining +1 +0 +0 +\d+s$`, narrow)
	t.Logf("kubectl get sandbox-gpu -o wide:\n%s", wide)
	t.Logf("kubectl get sandbox-gpu:\n%s", narrow)
}
