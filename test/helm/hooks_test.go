package helm

import (
	"strings"
	"testing"
)

// nriPlugin.cdiHooks reaches the policy's spec.nriPlugin.cdiHooks (the NRI
// plugin's --cdi-hooks), nvidia by default; a value the CRD does not know
// is refused by the API server, naming the allowed ones.
func TestNRICDIHooksValue(t *testing.T) {
	requireEnv(t)
	wantSpec(t, policy(t, mustRender(t)), map[string]interface{}{"nriPlugin.cdiHooks": "nvidia"})
	for _, v := range []string{"none", "any"} {
		p := policy(t, mustRender(t, "nriPlugin.cdiHooks="+v))
		wantSpec(t, p, map[string]interface{}{"nriPlugin.cdiHooks": v})
		if err := dryRun(t.Context(), p); err != nil {
			t.Errorf("cdiHooks=%s: %v", v, err)
		}
	}
	err := dryRun(t.Context(), policy(t, mustRender(t, "nriPlugin.cdiHooks=all")))
	if err == nil || !strings.Contains(err.Error(), "spec.nriPlugin.cdiHooks") || !strings.Contains(err.Error(), `"nvidia", "none", "any"`) {
		t.Errorf("cdiHooks=all: %v, want a refusal naming spec.nriPlugin.cdiHooks and its values", err)
	}
}
