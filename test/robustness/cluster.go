package robustness

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// prefix is the coordinators' etcd key prefix.
const prefix = "/mcpcancel/v1/"

// ClusterOptions sizes the timings of a cluster.
type ClusterOptions struct {
	Bin, EtcdBin string // the mcpcancel and etcdmember binaries
	// OldBin is the last release's mcpcancel, for the upgrade fault
	// (upgrade.go); empty if it could not be built.
	OldBin      string
	Dir         string // logs and data
	LeaseTTL    time.Duration
	Retention   time.Duration
	CallTimeout time.Duration
	Tokens      int // bearer tokens t<i> for principals p<i>
}

// Cluster is 3 etcd members, 2 coordinators, 3 workers and 2 HTTP
// gateways, each its own process, with proxies on the links faults cut.
type Cluster struct {
	opts ClusterOptions

	etcd       []*process
	etcdClient []string // client host:port per member

	coords    []*process
	coordAddr []string
	// coordEtcd[c][m] sits between coordinator c and etcd member m.
	coordEtcd [][]*Proxy

	workers    []*process
	workerAddr []string // Execute listen address
	// workerIn[w] sits between the gateways and worker w (its --advertise).
	workerIn []*Proxy
	// workerCoord[w][c] sits between worker w and coordinator c.
	workerCoord [][]*Proxy
	workerAdmin []string

	mu         sync.Mutex
	workerName []string // current name of each worker slot

	gateways []*process
	gwHTTP   []string

	rel  releaseLog // which release each component ran when
	gate coordGate  // which coordinators run this tree, for the operator

	Etcd  *clientv3.Client // direct to every member, for the checker
	coord *grpc.ClientConn // to both coordinators, for ListWorkers/ListAudit
	Coord pb.CoordinatorServiceClient
}

// StartCluster starts everything and waits until it serves.
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	c := &Cluster{opts: o}
	if err := c.writeTokens(); err != nil {
		return nil, err
	}
	addrs, err := restartableAddrs(3*2 + 2 + 3*2 + 2)
	if err != nil {
		return nil, err
	}
	take := func(n int) []string { a := addrs[:n]; addrs = addrs[n:]; return a }
	if err := c.startEtcd(ctx, take(3), take(3)); err != nil {
		return nil, err
	}
	if err := c.startCoordinators(ctx, take(2)); err != nil {
		return nil, err
	}
	if err := c.startWorkers(ctx, take(3), take(3)); err != nil {
		return nil, err
	}
	if err := c.startGateways(ctx, take(2)); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) writeTokens() error {
	var b strings.Builder
	for i := range c.opts.Tokens {
		fmt.Fprintf(&b, "t%d p%d\n", i, i)
	}
	return os.WriteFile(filepath.Join(c.opts.Dir, "tokens"), []byte(b.String()), 0o600)
}

func (c *Cluster) startEtcd(ctx context.Context, clients, peers []string) error {
	var initial []string
	for i, p := range peers {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, p))
	}
	c.etcdClient = clients
	for i := range 3 {
		p := newProcess(fmt.Sprintf("etcd%d", i), c.opts.EtcdBin, c.opts.Dir,
			"--name", fmt.Sprintf("m%d", i), "--dir", filepath.Join(c.opts.Dir, fmt.Sprintf("etcd%d.data", i)),
			"--client", clients[i], "--peer", peers[i], "--initial-cluster", strings.Join(initial, ","))
		if err := p.start(); err != nil {
			return err
		}
		c.etcd = append(c.etcd, p)
	}
	var eps []string
	for _, a := range clients {
		eps = append(eps, "http://"+a)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	c.Etcd = cli
	return waitFor(ctx, 60*time.Second, "etcd quorum", func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cli.Put(ctx, "/robustness/ready", "1")
		return err == nil
	})
}

func (c *Cluster) startCoordinators(ctx context.Context, listen []string) error {
	c.coordAddr = listen
	c.gate.old = make([]bool, 2)
	for i := range 2 {
		var eps []string
		var row []*Proxy
		for m, a := range c.etcdClient {
			p, err := NewProxy(fmt.Sprintf("coord%d-etcd%d", i, m), a)
			if err != nil {
				return err
			}
			row = append(row, p)
			eps = append(eps, "http://"+p.Addr())
		}
		c.coordEtcd = append(c.coordEtcd, row)
		p := newProcess(fmt.Sprintf("coord%d", i), c.opts.Bin, c.opts.Dir, "coordinator",
			"--listen", listen[i], "--etcd", strings.Join(eps, ","), "--name", coordName(i),
			"--lease-ttl", c.opts.LeaseTTL.String(), "--retention", c.opts.Retention.String(),
			"--shutdown-timeout", coordGrace.String())
		c.rel.set(coordName(i), false)
		if err := p.start(); err != nil {
			return err
		}
		c.coords = append(c.coords, p)
	}
	// The checker reads through the first coordinator.
	cc, err := grpc.NewClient(listen[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	c.coord, c.Coord = cc, pb.NewCoordinatorServiceClient(cc)
	for i := range 2 {
		if err := c.waitCoordinator(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// coordClient returns a client to coordinator i, closed by the caller.
func (c *Cluster) coordClient(i int) (pb.CoordinatorServiceClient, func(), error) {
	cc, err := grpc.NewClient(c.coordAddr[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return pb.NewCoordinatorServiceClient(cc), func() { cc.Close() }, nil
}

func (c *Cluster) waitCoordinator(ctx context.Context, i int) error {
	cl, done, err := c.coordClient(i)
	if err != nil {
		return err
	}
	defer done()
	return waitFor(ctx, 60*time.Second, c.coords[i].name, func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cl.ListWorkers(ctx, &pb.ListWorkersRequest{})
		return err == nil
	})
}

func (c *Cluster) startWorkers(ctx context.Context, listen, admin []string) error {
	c.workerAddr, c.workerAdmin = listen, admin
	for w := range 3 {
		in, err := NewProxy(fmt.Sprintf("gw-worker%d", w), listen[w])
		if err != nil {
			return err
		}
		c.workerIn = append(c.workerIn, in)
		var row []*Proxy
		for ci, a := range c.coordAddr {
			p, err := NewProxy(fmt.Sprintf("worker%d-coord%d", w, ci), a)
			if err != nil {
				return err
			}
			row = append(row, p)
		}
		c.workerCoord = append(c.workerCoord, row)
		c.workerName = append(c.workerName, "")
		c.workers = append(c.workers, newProcess(fmt.Sprintf("worker%d", w), c.opts.Bin, c.opts.Dir))
	}
	for w := range 3 {
		if err := c.restartWorker(ctx, w, 0); err != nil {
			return err
		}
	}
	return nil
}

// restartWorker (re)starts worker slot w under a new name and waits
// until a coordinator lists it.
func (c *Cluster) restartWorker(ctx context.Context, w, gen int) error {
	name := fmt.Sprintf("w%d-g%d", w, gen)
	var coords []string
	for _, p := range c.workerCoord[w] {
		coords = append(coords, p.Addr())
	}
	p := c.workers[w]
	p.setArgs("worker", "--demo", "--fixtures", "--name", name, "--listen", c.workerAddr[w],
		"--advertise", c.workerIn[w].Addr(), "--coordinator", strings.Join(coords, ","),
		"--admin", c.workerAdmin[w], "--drain-timeout", drainTimeout.String())
	c.rel.set(name, p.binary() == c.opts.OldBin)
	if err := p.start(); err != nil {
		return err
	}
	c.mu.Lock()
	c.workerName[w] = name
	c.mu.Unlock()
	return waitFor(ctx, 60*time.Second, name, func() bool { return c.workerListed(ctx, name) })
}

func (c *Cluster) workerListed(ctx context.Context, name string) bool {
	for i := range c.coordAddr {
		cl, done, err := c.coordClient(i)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := cl.ListWorkers(ctx, &pb.ListWorkersRequest{})
		cancel()
		done()
		if err != nil {
			continue
		}
		for _, wi := range resp.GetWorkers() {
			if wi.GetName() == name {
				return true
			}
		}
		return false
	}
	return false
}

func (c *Cluster) startGateways(ctx context.Context, listen []string) error {
	c.gwHTTP = listen
	for i := range 2 {
		p := newProcess(fmt.Sprintf("gateway%d", i), c.opts.Bin, c.opts.Dir, "gateway",
			"--http", listen[i], "--coordinator", strings.Join(c.coordAddr, ","), "--name", gatewayRecordName(i),
			"--tokens-file", filepath.Join(c.opts.Dir, "tokens"), "--call-timeout", c.opts.CallTimeout.String(),
			"--shutdown-grace", gatewayGrace.String())
		c.rel.set(gatewayRecordName(i), false)
		if err := p.start(); err != nil {
			return err
		}
		c.gateways = append(c.gateways, p)
	}
	for i := range 2 {
		if err := c.waitGateway(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) waitGateway(ctx context.Context, i int) error {
	url := "http://" + c.gwHTTP[i] + "/readyz"
	return waitFor(ctx, 60*time.Second, c.gateways[i].name, func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// MCPURL is gateway i's MCP endpoint.
func (c *Cluster) MCPURL(i int) string { return "http://" + c.gwHTTP[i] + "/mcp" }

// StdioArgs are the arguments of a stdio gateway named name.
func (c *Cluster) StdioArgs(name string) []string {
	return []string{"gateway", "--stdio", "--coordinator", strings.Join(c.coordAddr, ","), "--name", name,
		"--call-timeout", c.opts.CallTimeout.String(), "--shutdown-grace", "1s"}
}

// proxies lists every proxy.
func (c *Cluster) proxies() []*Proxy {
	var all []*Proxy
	for _, r := range c.coordEtcd {
		all = append(all, r...)
	}
	for _, r := range c.workerCoord {
		all = append(all, r...)
	}
	return append(all, c.workerIn...)
}

// HealAll heals every proxy and resumes every paused process.
func (c *Cluster) HealAll() {
	for _, p := range c.proxies() {
		p.Heal()
	}
	for _, p := range c.all() {
		p.signal(syscall.SIGCONT)
	}
}

func (c *Cluster) all() []*process {
	var all []*process
	all = append(all, c.etcd...)
	all = append(all, c.coords...)
	all = append(all, c.workers...)
	return append(all, c.gateways...)
}

// Close stops every process (gateways first) and every proxy.
func (c *Cluster) Close() {
	for _, group := range [][]*process{c.gateways, c.workers, c.coords, c.etcd} {
		var wg sync.WaitGroup
		for _, p := range group {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop(5 * time.Second) }()
		}
		wg.Wait()
	}
	for _, p := range c.proxies() {
		p.Close()
	}
	if c.coord != nil {
		c.coord.Close()
	}
	if c.Etcd != nil {
		c.Etcd.Close()
	}
}
