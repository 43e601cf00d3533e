// Package auditlog follows kube-apiserver's audit log file for the hosted backend's audit sidecar
// (cmd/audit-log, in the control-plane image): the API server writes the log to a file in a
// volume it shares with the sidecar, and the sidecar copies it to its stdout, so that
// `kubectl logs POD -c audit` shows it and the kubelet rotates and limits it like any container
// log.
//
// It owns reading that one file: waiting for it to appear, copying it from its beginning, following
// what is appended, and moving on to the new file when the API server rotates it (lumberjack:
// the file renamed to audit-<timestamp>.log and a new one created) or when it is truncated,
// writing whole lines only.
//
// It must not change the file or the rotated ones (the API server removes old backups itself with
// --audit-log-maxbackup), parse or filter audit events (it copies bytes), or keep state of its own
// across restarts: a restarted sidecar copies the current file again from its beginning.
package auditlog
