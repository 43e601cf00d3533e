// Package auditlog follows kube-apiserver's audit log file for the hosted backend's audit sidecar
// (cmd/audit-log, in the control-plane image): the API server writes the log to a file in a
// volume it shares with the sidecar, and the sidecar copies it to its stdout, so that
// `kubectl logs POD -c audit` shows it and the kubelet rotates and limits it like any container
// log.
//
// It owns reading that one file: waiting for it to appear, copying it from its beginning, following
// what is appended, and moving on to the new file when the API server rotates it (lumberjack:
// the file renamed to audit-<timestamp>.log and a new one created) or when it is truncated,
// writing whole lines only. A rotation is followed through every file rotated since (a flood of
// requests can rotate the file more than once between two checks): the rotated files newer than
// the one it was following, which it recognises by identity (os.SameFile) rather than by name,
// are copied oldest first before the new file, so that no line is lost or copied twice unless the
// API server removed a rotated file before it was read.
//
// It must not change, rename or remove the file or the rotated ones (the API server removes old
// backups itself with --audit-log-maxbackup), parse or filter audit events (it copies bytes), or
// keep state of its own across restarts: a restarted sidecar copies the current file again from
// its beginning, and none of the rotated ones.
package auditlog
