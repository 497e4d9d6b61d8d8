// Package operator will hold the cluster operator: the sandbox policy API,
// per-node workload configs and the operand DaemonSets.
// Tracked by the operator issue; nothing is implemented here yet.
package operator
