package local

// Audit logs: every cluster's API server writes one (controlplane.AuditPolicy: who did what, at
// Metadata level, never a body) to logs/audit.log in its folder, rotated at
// controlplane.AuditMaxSizeMB with controlplane.AuditMaxBackups kept, unless its ProviderConfig
// turns them off (spec.audit.disabled, which reaches the Backend bound to it, ForProfile, and is
// recorded as meta.NoAudit). A change restarts the API server with or without them; the logs
// written stay.

// setAudit records whether the cluster's API server keeps an audit log, and restarts it when that
// changed.
func (in *instance) setAudit(on bool) error {
	in.mu.Lock()
	if in.meta.NoAudit == !on {
		in.mu.Unlock()
		return nil
	}
	m := in.meta
	m.NoAudit = !on
	if err := writeMeta(in.dir, m); err != nil {
		in.mu.Unlock()
		return err
	}
	in.meta = m
	in.mu.Unlock()
	in.logger().Info("The ProviderConfig switched the audit log: the API server restarts", "audit", on)
	in.restart(procAPIServer)
	return nil
}
