package v1alpha1

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBackupPolicyScheduled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policy   *BackupPolicy
		interval time.Duration
		keep     int
	}{
		{name: "unset: the defaults", policy: nil, interval: time.Hour, keep: 24},
		{name: "empty: the defaults", policy: &BackupPolicy{}, interval: time.Hour, keep: 24},
		{name: "set", policy: &BackupPolicy{Interval: &metav1.Duration{Duration: 15 * time.Minute}, Keep: 3}, interval: 15 * time.Minute, keep: 3},
		{name: "disabled: no schedule, keep still counts", policy: &BackupPolicy{Disabled: true, Keep: 5}, interval: 0, keep: 5},
		{name: "a zero interval is the default", policy: &BackupPolicy{Interval: &metav1.Duration{}}, interval: time.Hour, keep: 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interval, keep := tc.policy.Scheduled()
			assert.Equal(t, tc.interval, interval)
			assert.Equal(t, tc.keep, keep)
		})
	}
}

func TestSnapshotsBeforeDelete(t *testing.T) {
	no, yes := false, true
	assert.True(t, (*BackupPolicy)(nil).SnapshotsBeforeDelete(), "unset: on")
	assert.True(t, (&BackupPolicy{}).SnapshotsBeforeDelete(), "field unset: on")
	assert.True(t, (&BackupPolicy{SnapshotBeforeDelete: &yes}).SnapshotsBeforeDelete())
	assert.False(t, (&BackupPolicy{SnapshotBeforeDelete: &no}).SnapshotsBeforeDelete())
}
