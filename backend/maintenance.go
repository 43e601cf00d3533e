package backend

import "time"

// MaintenanceInterval is how often a backend runs the periodic pass over a cluster's etcd (the
// defragmentation of fragmented members, backend/etcdmaint), whichever backend keeps it: the local
// backend in its health checks, the hosted backend with a maintenance Job. A full etcd is freed
// sooner, at each check.
const MaintenanceInterval = 6 * time.Hour
