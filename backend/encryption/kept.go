package encryption

import (
	"slices"
)

// Kept is the copy of a cluster's keys kept beside its snapshots (stored only wrapped: Wrap): the
// keys its snapshots' Secrets may be written with, and those its running cluster uses, so that a
// restore, into the cluster or a new one, reads the snapshot's Secrets and a lost key of the
// running cluster can be had back. A key no snapshot needs and the running cluster does not use
// is removed from it (Settle); the cluster's own State keeps every key it ever had.
type Kept struct {
	Keys []Key `json:"keys"`
	// Needs names, per snapshot, the keys its Secrets may be written with. A snapshot it does not
	// name (taken by a release that did not record it, or whose record was never written) may
	// need any key: while one is there, no key is removed.
	Needs map[string][]string `json:"needs,omitempty"`
}

// FromState is the copy an earlier release kept of s in plain text: its keys, nothing recorded
// of what its snapshots need.
func FromState(s State) Kept { return Kept{Keys: slices.Clone(s.Keys)} }

// State is a State of k's keys, none of them writing: what a restore adopts (State.Adopt).
func (k Kept) State() State { return State{Keys: slices.Clone(k.Keys)} }

// Names are the names of k's keys.
func (k Kept) Names() []string { return names(k.Keys) }

func names(keys []Key) []string {
	out := make([]string, len(keys))
	for i, x := range keys {
		out[i] = x.Name
	}
	return out
}

// InUse names the keys the Secrets of a cluster with keys s may be written with now: the key that
// writes once every Secret was rewritten with it (and a staged key, which writes next); every key
// before that.
func (s State) InUse() []string {
	if len(s.Keys) == 0 {
		return nil
	}
	if !s.Done() {
		return names(s.Keys)
	}
	out := []string{s.Writer()}
	if s.Staged && s.Keys[0].Name != s.Writer() {
		out = append(out, s.Keys[0].Name)
	}
	return out
}

// Mark is what the start of a snapshot saw of its cluster's keys: their names, and those in use.
type Mark struct {
	Keys  []string `json:"keys"`
	InUse []string `json:"inUse"`
}

// Mark is s as a snapshot's start sees it.
func (s State) Mark() Mark { return Mark{Keys: names(s.Keys), InUse: s.InUse()} }

// Needs names the keys a snapshot may need that started at m and ended with the keys after: those
// in use at either end, and every key added in between (it may have written while etcd was read).
func (m Mark) Needs(after State) []string {
	out := slices.Clone(m.InUse)
	for _, n := range after.InUse() {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, x := range after.Keys {
		if !slices.Contains(m.Keys, x.Name) && !slices.Contains(out, x.Name) {
			out = append(out, x.Name)
		}
	}
	return out
}

// add adds the keys of keys named in only (every one when only is nil) that k lacks.
func (k *Kept) add(keys []Key, only []string) {
	for _, x := range keys {
		if (only == nil || slices.Contains(only, x.Name)) && !slices.ContainsFunc(k.Keys, func(y Key) bool { return y.Name == x.Name }) {
			k.Keys = append(slices.Clip(k.Keys), x) // never into an array k.Keys shares
		}
	}
}

// Merge adds o's keys and what o records of snapshots to k: a copy an earlier release kept in
// plain text, read beside the wrapped one, loses nothing. A snapshot both record keeps the keys
// both name.
func (k *Kept) Merge(o Kept) {
	k.add(o.Keys, nil)
	for snap, needs := range o.Needs {
		k.record(snap, needs)
	}
}

func (k *Kept) record(snapshot string, needs []string) {
	if k.Needs == nil {
		k.Needs = map[string][]string{}
	}
	cur := k.Needs[snapshot]
	for _, n := range needs {
		if !slices.Contains(cur, n) {
			cur = append(cur, n)
		}
	}
	k.Needs[snapshot] = cur
}

// Record records that snapshot needs the keys named (Mark.Needs), and keeps them, from s.
func (k *Kept) Record(snapshot string, needs []string, s State) {
	k.add(s.Keys, needs)
	k.record(snapshot, needs)
}

// Unrecorded reports whether a snapshot of snapshots has no record in k of the keys it needs: it
// may need any.
func (k Kept) Unrecorded(snapshots []string) bool {
	return slices.ContainsFunc(snapshots, func(s string) bool { _, ok := k.Needs[s]; return !ok })
}

// Settle brings k up to date with the snapshots that are there (by name) and the running
// cluster's keys (nil: the cluster is gone): it keeps the keys running uses, forgets what the
// snapshots no longer there needed, and removes every key that no snapshot there needs and
// running does not use. With holdAll (data kept elsewhere may need any key), or while a snapshot
// there has no record of what it needs, it removes nothing and keeps every key of running. It
// returns the names of the keys removed.
func (k *Kept) Settle(running *State, snapshots []string, holdAll bool) []string {
	for snap := range k.Needs {
		if !slices.Contains(snapshots, snap) {
			delete(k.Needs, snap)
		}
	}
	if len(k.Needs) == 0 {
		k.Needs = nil
	}
	unknown := holdAll || k.Unrecorded(snapshots)
	var keep []string
	if running != nil {
		if unknown {
			k.add(running.Keys, nil)
		} else {
			keep = running.InUse()
			k.add(running.Keys, keep)
		}
	}
	if unknown {
		return nil
	}
	for _, needs := range k.Needs {
		keep = append(keep, needs...)
	}
	var removed []string
	k.Keys = slices.DeleteFunc(slices.Clone(k.Keys), func(x Key) bool { // k.Keys may share its array
		gone := !slices.Contains(keep, x.Name)
		if gone {
			removed = append(removed, x.Name)
		}
		return gone
	})
	return removed
}
