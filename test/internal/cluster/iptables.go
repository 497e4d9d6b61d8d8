package cluster

import (
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
)

// iptablesTable is one table of iptables-save's output.
type iptablesTable struct {
	Chains []string `json:"chains"`
	Rules  []string `json:"rules"` // "-A CHAIN ..." lines as iptables-save prints them
}

// builtinChains are the chains every table starts with.
var builtinChains = []string{"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}

// iptablesFamilies maps a family to its save and restore programs.
var iptablesFamilies = map[string][2]string{
	"ipv4": {"iptables-save", "iptables-restore"},
	"ipv6": {"ip6tables-save", "ip6tables-restore"},
}

// saveIPTables reads every table of both families (a family whose programs are missing is left out).
func saveIPTables() (map[string]map[string]*iptablesTable, error) {
	out := map[string]map[string]*iptablesTable{}
	for family, progs := range iptablesFamilies {
		if _, err := exec.LookPath(progs[0]); err != nil {
			continue
		}
		data, err := exec.Command(progs[0]).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", progs[0], err)
		}
		out[family] = parseIPTablesSave(string(data))
	}
	return out, nil
}

func parseIPTablesSave(text string) map[string]*iptablesTable {
	tables := map[string]*iptablesTable{}
	var cur *iptablesTable
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "*"):
			cur = &iptablesTable{}
			tables[line[1:]] = cur
		case cur == nil:
		case strings.HasPrefix(line, ":"):
			if f := strings.Fields(line[1:]); len(f) > 0 {
				cur.Chains = append(cur.Chains, f[0])
			}
		case strings.HasPrefix(line, "-A "):
			cur.Rules = append(cur.Rules, line)
		}
	}
	return tables
}

// managedChain reports whether a chain is one the kubelet or a CNI plugin makes.
func managedChain(name string) bool {
	for _, p := range iptablesChainPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// diffIPTables lists the chains and rules in now but not in before.
func diffIPTables(before, now map[string]map[string]*iptablesTable) []string {
	var d []string
	for family, tables := range now {
		for name, t := range tables {
			var old iptablesTable
			if b := before[family][name]; b != nil {
				old = *b
			}
			for _, c := range t.Chains {
				// iptables-nft makes a table with its built-in chains on first use; left empty
				// (policy ACCEPT, no rules) they change nothing.
				if !slices.Contains(old.Chains, c) && !slices.Contains(builtinChains, c) {
					d = append(d, fmt.Sprintf("iptables %s %s: chain %s left behind", family, name, c))
				}
			}
			for _, r := range t.Rules {
				if !slices.Contains(old.Rules, r) {
					d = append(d, fmt.Sprintf("iptables %s %s: rule %q left behind", family, name, r))
				}
			}
		}
	}
	slices.Sort(d)
	return d
}

// restoreIPTables removes the kubelet's and the CNI plugins' chains that were not there before, and
// the rules of other chains that jump to them, with one iptables-restore --noflush per family.
func restoreIPTables(before map[string]map[string]*iptablesTable, logf func(string, ...any)) error {
	now, err := saveIPTables()
	if err != nil {
		return err
	}
	var errs []error
	for family, tables := range now {
		script, removed := iptablesCleanup(before[family], tables)
		if script == "" {
			continue
		}
		logf("cleanup: removing iptables %s chains %s", family, strings.Join(removed, ", "))
		cmd := exec.Command(iptablesFamilies[family][1], "--noflush")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %s\n%s", iptablesFamilies[family][1], err, out, script))
		}
	}
	return errors.Join(errs...)
}

// iptablesCleanup is the iptables-restore --noflush input that takes one family's tables from now
// back to before: the rules of older chains that jump to a managed chain made since are deleted,
// then those chains flushed and deleted. It also returns the chains (table/chain), sorted.
func iptablesCleanup(before, now map[string]*iptablesTable) (string, []string) {
	var script strings.Builder
	var removed []string
	names := slices.Sorted(maps.Keys(now))
	for _, name := range names {
		t := now[name]
		var old iptablesTable
		if b := before[name]; b != nil {
			old = *b
		}
		var added []string
		for _, c := range t.Chains {
			if managedChain(c) && !slices.Contains(old.Chains, c) {
				added = append(added, c)
				removed = append(removed, name+"/"+c)
			}
		}
		if len(added) == 0 {
			continue
		}
		fmt.Fprintf(&script, "*%s\n", name)
		for _, r := range t.Rules {
			f := strings.Fields(r)
			if len(f) < 2 || slices.Contains(added, f[1]) || slices.Contains(old.Rules, r) {
				continue // a rule of a chain about to go, or one that was there before
			}
			if jumpsTo(f, added) {
				fmt.Fprintf(&script, "-D %s\n", strings.TrimPrefix(r, "-A "))
			}
		}
		for _, c := range added {
			fmt.Fprintf(&script, "-F %s\n", c)
		}
		for _, c := range added {
			fmt.Fprintf(&script, "-X %s\n", c)
		}
		script.WriteString("COMMIT\n")
	}
	return script.String(), removed
}

// jumpsTo reports whether a rule's fields jump (-j) or go (-g) to one of chains.
func jumpsTo(fields []string, chains []string) bool {
	for i := 0; i+1 < len(fields); i++ {
		if (fields[i] == "-j" || fields[i] == "-g" || fields[i] == "--jump" || fields[i] == "--goto") &&
			slices.Contains(chains, fields[i+1]) {
			return true
		}
	}
	return false
}
