// Package manager is the controller engine: it runs, for each ClusterProfile, that profile's own
// reconcilers (one per registered kind: Cluster, AccessRequest), starting and stopping them while
// the process runs, all over ONE shared controller-runtime cache. It owns routing, queues, workers
// and their metrics; it knows nothing about what a reconciler does, and it must not create
// informers or event handlers per profile.
//
// # Routing
//
// The Engine registers exactly one event handler per kind on the shared informer of that kind,
// once, when it starts. Each Kind names a routing key taken from the object (a Cluster's
// spec.profile; an AccessRequest's profile label, only when its provider label is this
// operator's). For every event the handler applies the kind's predicates, computes the key and
// looks the owning profile up in a map: dispatch costs the same with one running profile or a
// thousand. An update whose key changed (the labeller adding the labels, say) is delivered to the
// new owner and to the old one, so that the old owner can let go. Objects whose key has no
// running profile reach nobody.
//
// # Secondary watches
//
// A Watch maps the events of another kind to objects of a routed kind (a Cluster that became
// Ready to the AccessRequests waiting for it, a Secret to the AccessRequest owning it). It too has
// one handler on the shared informer; its Map reads a cache index and names, for each object, the
// profile that owns it, so the engine enqueues it with the same map lookup as a routed event.
//
// # Start
//
// StartProfile builds a rate-limited workqueue and a worker pool per kind, publishes the queues in
// the routing map, and then enqueues just that profile's existing objects, found through a cache
// index on the same routing key. It neither replays the cache nor waits for a cache sync: the
// shared informers synced once when the engine started. Starting an already running profile with
// the same Hash does nothing; a different Hash restarts it. Operations on one profile are
// serialized; different profiles never wait for each other.
//
// # Stop
//
// StopProfile first removes the profile from the routing map (under the lock the event handler
// reads it with, so no event can be delivered afterwards), then cancels the profile's context,
// shuts its queues down and waits until every worker has returned; items still queued are
// dropped. When StopProfile returns nothing of the profile runs, and its metric series are gone.
// A reconciler must honour its context so that Stop does not wait for it.
//
// # Leadership
//
// The Engine is a manager.LeaderElectionRunnable: the manager starts it only once this replica
// is elected, and until then StartProfile waits. When the lease is lost or the process shuts
// down, the manager cancels the Engine's context and the Engine stops every profile and removes
// its event handlers before it returns. A panic in a reconciler is recovered, logged, counted and
// treated as an error of that item; it affects no other profile.
package manager
