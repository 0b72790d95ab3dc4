package etcd_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/holdfast-dev/holdfast/internal/testutil"
)

// The tests run a real 3-member etcd cluster: the etcd binary of Debian's
// etcd-server package (.ci/run installs it), one process per member, on
// loopback ports, each with its data directory in t.TempDir. Set ETCD_BIN
// to use another binary.
func etcdBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ETCD_BIN"); p != "" {
		return p
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		const msg = "no etcd binary: install Debian's etcd-server (apt-get install etcd-server, as .ci/run does) or set ETCD_BIN"
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v", msg, err) // CI installs it: missing is a failure
		}
		t.Skipf("%s: %v", msg, err)
	}
	return p
}

type member struct {
	name      string
	clientURL string
	peerURL   string
	dir       string
	args      []string
	log       *syncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

type cluster struct {
	t       testing.TB
	bin     string
	members []*member
}

// freePorts keeps n loopback ports for t (testutil.LoopbackPort): the
// members bind them next, and again when restarted.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = testutil.LoopbackPort(t)
	}
	return ports
}

// startCluster starts a 3-member cluster and waits until it serves a
// linearizable read. Every member is killed at test end, pass or fail.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	c := newCluster(t, t.TempDir())
	t.Cleanup(c.stop)
	c.start(t)
	return c
}

func newCluster(t testing.TB, dir string) *cluster {
	c := &cluster{t: t, bin: etcdBinary(t)}
	ports := freePorts(t, 6)
	var initial []string
	for i := range 3 {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			clientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			log:       &syncBuffer{},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	token := fmt.Sprintf("holdfast-test-%d", time.Now().UnixNano())
	for _, m := range c.members {
		m.args = []string{
			"--name", m.name,
			"--data-dir", m.dir,
			"--listen-client-urls", m.clientURL,
			"--advertise-client-urls", m.clientURL,
			"--listen-peer-urls", m.peerURL,
			"--initial-advertise-peer-urls", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			// Fast failover for the tests; generous enough for a loaded
			// two-core machine.
			"--heartbeat-interval", "50",
			"--election-timeout", "750",
			"--logger", "zap",
			"--log-level", "warn",
		}
	}
	return c
}

func (c *cluster) start(t testing.TB) {
	t.Helper()
	for _, m := range c.members {
		if err := c.run(m); err != nil {
			t.Fatal(err)
		}
	}
	c.waitHealthy(t)
}

func (c *cluster) run(m *member) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	// If the test binary dies, so do its members.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.cmd, m.done = cmd, done
	return nil
}

// pid returns the member's process id, 0 when it is not running.
func (m *member) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// kill SIGKILLs member i and waits for the process to end.
func (c *cluster) kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// restart starts a killed member again on its data directory.
func (c *cluster) restart(t testing.TB, i int) {
	t.Helper()
	if err := c.run(c.members[i]); err != nil {
		t.Fatal(err)
	}
}

// killAll SIGKILLs every member (a crash-consistent stop: etcd recovers
// from its write-ahead log).
func (c *cluster) killAll() {
	for i := range c.members {
		c.kill(i)
	}
}

// restartAll starts every member again on its data directory and waits
// for quorum.
func (c *cluster) restartAll(t testing.TB) {
	t.Helper()
	for i := range c.members {
		c.restart(t, i)
	}
	c.waitHealthy(t)
}

// backup stops the cluster, copies every member's data directory into a
// temporary directory, which it returns, and starts the cluster again.
func (c *cluster) backup(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	c.killAll()
	for _, m := range c.members {
		copyDir(t, m.dir, filepath.Join(dir, m.name))
	}
	c.restartAll(t)
	return dir
}

// putBack replaces the data directories of the stopped cluster with the
// copies backup made: started again, it is the same cluster (same cluster
// id, same members) with the history it had at the backup.
func (c *cluster) putBack(t testing.TB, dir string) {
	t.Helper()
	for _, m := range c.members {
		if err := os.RemoveAll(m.dir); err != nil {
			t.Fatal(err)
		}
		copyDir(t, filepath.Join(dir, m.name), m.dir)
	}
}

// copyDir copies the tree src to dst, keeping permissions (etcd wants its
// data directory 0700).
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(to, info.Mode().Perm())
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			_ = out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

func (c *cluster) stop() {
	for i := range c.members {
		c.kill(i)
	}
	if c.t != nil && c.t.Failed() {
		for _, m := range c.members {
			c.t.Logf("etcd member %s log:\n%s", m.name, m.log.String())
		}
	}
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// client returns a raw etcd client of the whole cluster, closed at test end.
func (c *cluster) client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// waitHealthy waits until a linearizable read succeeds.
func (c *cluster) waitHealthy(t testing.TB) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if !testutil.Wait(waitLimit, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = cli.Get(ctx, "health")
		return err == nil
	}) {
		for _, m := range c.members {
			t.Logf("etcd member %s log:\n%s", m.name, m.log.String())
		}
		t.Fatalf("etcd cluster not healthy after %v: %v", waitLimit, err)
	}
}

// leader returns the index of the current leader.
func (c *cluster) leader(t testing.TB) int {
	t.Helper()
	cli := c.client(t)
	var lastErr error
	leader := -1
	if !testutil.Wait(waitLimit, func() bool {
		for i, m := range c.members {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cli.Status(ctx, m.clientURL)
			cancel()
			if err != nil {
				lastErr = err
				continue
			}
			if st.Leader != 0 && st.Leader == st.Header.MemberId {
				leader = i
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no leader: %v", lastErr)
	}
	return leader
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proxy is a TCP proxy on a loopback port in front of one member, so a
// test can drop a client's connections or cut it off while the cluster
// runs on.
type proxy struct {
	l net.Listener

	mu       sync.Mutex
	upstream string
	down     bool
	hole     chan struct{} // non-nil while black-holed; closed to heal
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func startProxy(t testing.TB, upstreamURL string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, upstream: strings.TrimPrefix(upstreamURL, "http://"), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) url() string { return "http://" + p.l.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		upstream := p.upstream
		p.mu.Unlock()
		up, err := net.DialTimeout("tcp", upstream, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.quiet()
			if _, err := dst.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// drop closes every open connection; new ones are accepted.
func (p *proxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// setDown cuts (true) or restores (false) the path to the member.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.drop()
	}
}

// retarget sends the proxy's new connections to the member at
// upstreamURL, and drops the open ones.
func (p *proxy) retarget(upstreamURL string) {
	p.mu.Lock()
	p.upstream = strings.TrimPrefix(upstreamURL, "http://")
	p.mu.Unlock()
	p.drop()
}

// setBlackhole(true) makes the proxy accept connections and pass nothing
// on either way, until setBlackhole(false).
func (p *proxy) setBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hole == nil:
		p.hole = make(chan struct{})
	case !on && p.hole != nil:
		close(p.hole)
		p.hole = nil
	}
}

// quiet returns once the proxy is not black-holed.
func (p *proxy) quiet() {
	p.mu.Lock()
	hole := p.hole
	p.mu.Unlock()
	if hole != nil {
		<-hole
	}
}

func (p *proxy) close() {
	_ = p.l.Close()
	p.setBlackhole(false)
	p.drop()
	p.wg.Wait()
}

// proxies puts a proxy in front of every member of c.
type proxies []*proxy

func startProxies(t testing.TB, c *cluster) proxies {
	var ps proxies
	for _, m := range c.members {
		ps = append(ps, startProxy(t, m.clientURL))
	}
	return ps
}

func (ps proxies) urls() []string {
	var u []string
	for _, p := range ps {
		u = append(u, p.url())
	}
	return u
}

func (ps proxies) drop() {
	for _, p := range ps {
		p.drop()
	}
}

func (ps proxies) setDown(down bool) {
	for _, p := range ps {
		p.setDown(down)
	}
}

func (ps proxies) setBlackhole(on bool) {
	for _, p := range ps {
		p.setBlackhole(on)
	}
}
