package hosted

import (
	"context"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
)

// restoreComponent carries a restore under way on by a step where it can (restore.go). It comes
// before the record and the workloads: each step changes what etcd's and the API servers' pods
// are made of (the data folder, the snapshot to fetch, the mark that rolls the API servers).
type restoreComponent struct{}

func (restoreComponent) name() string { return "restore" }

func (restoreComponent) step(ctx context.Context, sc *scope) (result, error) {
	restoring, err := sc.b.advanceRestore(ctx, sc.h, sc.cl, sc.s, &sc.ps)
	if err != nil {
		return result{}, err
	}
	sc.s.restoreSpec(sc.ps)
	sc.restoring = restoring
	if restoring != "" {
		return result{waiting: restoring, retry: 3 * time.Second}, nil
	}
	return result{}, nil
}

// recordComponent saves the record before the workloads are made from it: the version, image,
// data folder and restore step they run must be recorded first, or the next Ensure, reading an
// older record, would roll them back (an upgrade half-recorded, a restore step lost). It saves
// only a change (scope.save), as the end of the pipeline does.
type recordComponent struct{}

func (recordComponent) name() string { return "record" }

func (recordComponent) step(ctx context.Context, sc *scope) (result, error) {
	return result{}, sc.save(ctx)
}

// refString names sc's Cluster in logs.
func refString(sc *scope) string { return backend.RefOf(sc.cl).String() }
