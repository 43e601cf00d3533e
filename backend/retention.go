package backend

import (
	"slices"
	"strconv"
	"strings"
	"time"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// Retention says which snapshots of a cluster are kept: the newest Keep, and, by age tiers, the
// newest snapshot of each of the last Hourly hours, Daily days, Weekly weeks (Monday to Sunday)
// and Monthly months (UTC, counted back from now: the current hour is the first of the last
// Hourly hours). A snapshot one rule keeps is kept. The newest snapshot is always kept: every
// snapshot a backend lists was verified when it was taken (Backups.Snapshot records only
// verified ones), so the newest listed is the newest verified one. A zero Retention keeps every
// snapshot.
type Retention struct {
	// Keep is how many of the newest snapshots are kept whatever their age.
	Keep int `json:"keep,omitempty"`
	// Hourly, Daily, Weekly and Monthly are the age tiers: how many of the last hours, days,
	// weeks and months keep their newest snapshot.
	Hourly  int `json:"hourly,omitempty"`
	Daily   int `json:"daily,omitempty"`
	Weekly  int `json:"weekly,omitempty"`
	Monthly int `json:"monthly,omitempty"`
}

// KeepNewest is the retention of a flat count: the newest keep snapshots.
func KeepNewest(keep int) Retention { return Retention{Keep: keep} }

// IsZero reports whether r keeps every snapshot (no rule at all).
func (r Retention) IsZero() bool {
	return r.Keep <= 0 && r.Hourly <= 0 && r.Daily <= 0 && r.Weekly <= 0 && r.Monthly <= 0
}

// String says what r keeps, for conditions and Events: "the newest 24" or "the newest 3, and the
// newest of each of the last 24 hours, 7 days".
func (r Retention) String() string {
	if r.IsZero() {
		return "every snapshot"
	}
	var tiers []string
	for _, t := range r.tiers() {
		if t.n > 0 {
			tiers = append(tiers, strconv.Itoa(t.n)+" "+t.unit)
		}
	}
	keep := max(r.Keep, 1)
	if len(tiers) == 0 {
		return "the newest " + strconv.Itoa(keep)
	}
	return "the newest " + strconv.Itoa(keep) + ", and the newest of each of the last " + strings.Join(tiers, ", ")
}

// Flags are r as the command-line flags of cmd/etcd-snapshot save (RetentionFlags reads them).
func (r Retention) Flags() []string {
	return []string{"--keep=" + strconv.Itoa(r.Keep), "--hourly=" + strconv.Itoa(r.Hourly), "--daily=" + strconv.Itoa(r.Daily),
		"--weekly=" + strconv.Itoa(r.Weekly), "--monthly=" + strconv.Itoa(r.Monthly)}
}

// tier is one age tier: n buckets, and the bucket a time falls in counted back from now's (0 is
// now's bucket).
type tier struct {
	n      int
	unit   string
	bucket func(t, now time.Time) int
}

func (r Retention) tiers() []tier {
	return []tier{
		{r.Hourly, "hours", func(t, now time.Time) int {
			return int(now.Truncate(time.Hour).Sub(t.Truncate(time.Hour)) / time.Hour)
		}},
		{r.Daily, "days", func(t, now time.Time) int { return daysBetween(t, now) }},
		{r.Weekly, "weeks", func(t, now time.Time) int { return daysBetween(weekStart(t), weekStart(now)) / 7 }},
		{r.Monthly, "months", func(t, now time.Time) int {
			return (now.Year()*12 + int(now.Month())) - (t.Year()*12 + int(t.Month()))
		}},
	}
}

// daysBetween is how many UTC calendar days t is before now.
func daysBetween(t, now time.Time) int {
	day := func(x time.Time) time.Time { return time.Date(x.Year(), x.Month(), x.Day(), 0, 0, 0, 0, time.UTC) }
	return int(day(now).Sub(day(t)).Hours() / 24)
}

// weekStart is the Monday of t's week (UTC).
func weekStart(t time.Time) time.Time {
	back := (int(t.Weekday()) + 6) % 7 // Monday 0 … Sunday 6
	return t.AddDate(0, 0, -back)
}

// Kept reports, for each of snaps, whether r keeps it at now. snaps may come in any order.
func (r Retention) Kept(snaps []Snapshot, now time.Time) []bool {
	kept := make([]bool, len(snaps))
	if r.IsZero() {
		for i := range kept {
			kept[i] = true
		}
		return kept
	}
	now = now.UTC()
	order := NewestFirst(snaps)
	for rank, i := range order {
		if rank < max(r.Keep, 1) { // the newest is always kept
			kept[i] = true
		}
	}
	for _, t := range r.tiers() {
		if t.n <= 0 {
			continue
		}
		seen := map[int]bool{}
		for _, i := range order {
			taken := snaps[i].Taken.UTC()
			if taken.After(now) {
				taken = now // a clock ahead: counted in now's bucket
			}
			b := t.bucket(taken, now)
			if b < t.n && !seen[b] {
				seen[b] = true
				kept[i] = true
			}
		}
	}
	return kept
}

// Prune is the snapshots of snaps that r removes at now, oldest first. It never removes the
// newest snapshot; a zero Retention removes none.
func (r Retention) Prune(snaps []Snapshot, now time.Time) (remove []Snapshot) {
	kept := r.Kept(snaps, now)
	order := NewestFirst(snaps)
	for j := len(order) - 1; j >= 0; j-- {
		if i := order[j]; !kept[i] {
			remove = append(remove, snaps[i])
		}
	}
	return remove
}

// NewestFirst is the indexes of snaps, newest first (by Taken, then by name).
func NewestFirst(snaps []Snapshot) []int {
	order := make([]int, len(snaps))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := snaps[b].Taken.Compare(snaps[a].Taken); c != 0 {
			return c
		}
		return strings.Compare(snaps[b].Name, snaps[a].Name)
	})
	return order
}

// RetentionOf is the retention of a ProviderConfig's spec.backup (nil: the default, the newest
// 24): its keep, default 24 without age tiers and none (the newest only) with them, and its tiers.
func RetentionOf(p *providersv1alpha1.BackupPolicy) Retention {
	_, keep := p.Scheduled()
	if p == nil || p.Retention == nil {
		return KeepNewest(keep)
	}
	t := p.Retention
	r := Retention{Keep: int(p.Keep), Hourly: int(t.Hourly), Daily: int(t.Daily), Weekly: int(t.Weekly), Monthly: int(t.Monthly)}
	if r.IsZero() { // retention: {} is no tier: the flat count
		return KeepNewest(keep)
	}
	return r
}
