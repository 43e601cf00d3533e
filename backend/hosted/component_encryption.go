package hosted

import (
	"context"
)

// encryptionComponent brings the keys the API servers encrypt Secrets with one step on
// (encryptionKeys): made, staged, written with, rotated. It comes before restoreComponent (a
// restore adopts its snapshot's keys before its serve reads the snapshot, so a snapshot removed
// meanwhile, whose keys go only after its file, fails the serve instead) and before the
// workloads (the API server's first pod template carries the keys' checksum).
type encryptionComponent struct{}

func (encryptionComponent) name() string { return "encryption" }

func (encryptionComponent) step(ctx context.Context, sc *scope) (result, error) {
	keys, err := sc.b.encryptionKeys(ctx, sc.h, sc.cl, sc.s, sc.ps)
	if err != nil {
		return result{}, err
	}
	sc.keys = keys
	sc.ps.Encryption = keys.Status("")
	return result{}, nil
}

// rewriteComponent rewrites every Secret of the control plane with the key that writes, once
// the API servers serve and every one reads with it (rewriteSecrets). A rewrite that fails is
// tried again after encryptionRetry; the control plane serves meanwhile.
type rewriteComponent struct{}

func (rewriteComponent) name() string { return "rewrite" }

func (rewriteComponent) step(ctx context.Context, sc *scope) (result, error) {
	if sc.restoring != "" || !sc.st.Ready {
		return result{}, nil
	}
	keys, err := sc.b.rewriteSecrets(ctx, sc.h, sc.cl, sc.s, sc.keys, sc.admin)
	sc.keys = keys
	if err != nil {
		sc.b.opts.Logger.Error(err, "Encryption at rest: tried again soon", "cluster", refString(sc))
		sc.ps.Encryption = keys.Status(err.Error())
		return result{waiting: err.Error(), retry: encryptionRetry}, nil
	}
	sc.ps.Encryption = keys.Status("")
	return result{}, nil
}
