package hosted

import "context"

// maintenanceComponent reads the etcd members' states (etcdmembers.go: EtcdHealthy) and runs
// etcd's maintenance Jobs (maintain.go) when no restore is under way:
// after servingComponent, since a first check waits for a serving control plane, and whatever it
// found, since a full etcd (NOSPACE) is what keeps it from serving.
type maintenanceComponent struct{}

func (maintenanceComponent) name() string { return "maintenance" }

func (maintenanceComponent) step(ctx context.Context, sc *scope) (result, error) {
	if sc.restoring != "" {
		return result{}, nil
	}
	members, err := etcdMembers(ctx, sc.h, sc.s)
	if err != nil {
		return result{}, err
	}
	sc.members = members
	wait, err := sc.b.maintainEtcd(ctx, sc.h, sc.cl, sc.s, &sc.ps, sc.st.Ready)
	return result{retry: wait}, err
}
