// Package coordinator is the control plane of mcpcancel: a gRPC service that
// decides, exactly once per call and in etcd, whether completion,
// cancellation or failure won. Every decision is one etcd transaction
// guarded by the call record's revision (the fence) that also writes the
// decision's audit record; concurrent decisions share a commit (group
// commit). Replicas hold no state another replica needs: kill any of them
// and nothing is lost.
//
// A composition root runs it on an etcd client:
//
//	srv := coordinator.New(coordinator.Options{Client: etcdClient, Name: "c1"})
//	pb.RegisterCoordinatorServiceServer(grpcServer, srv)
//	pb.RegisterAdminServiceServer(grpcServer, coordinator.NewAdmin(srv))
//	err := srv.Run(ctx) // serves until ctx ends: janitor, watches, leases
//
// Gateways, workers and tools never import this package: they use the
// generated API and api/client.
package coordinator
