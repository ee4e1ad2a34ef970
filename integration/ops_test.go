package integration

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Operating mzproxy: the metrics endpoint, health checks, and SIGHUP.

var metricsLine = regexp.MustCompile(`mzproxy (?:listening|ready).*metrics="?([0-9.]+:[0-9]+)`)

// metricsAddr is the HTTP address the proxy printed in its ready line.
func (p *proxyProc) metricsAddr(t testing.TB) string {
	t.Helper()
	m := metricsLine.FindStringSubmatch(p.log.String())
	if m == nil {
		t.Fatalf("no metrics address in the listening line:\n%s", p.log.String())
	}
	return m[1]
}

// get fetches an ops endpoint; connections are not kept, so no client
// goroutine outlives the test.
func get(t testing.TB, addr, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// metricValue is the value of an unlabeled series in a scrape.
func metricValue(t testing.TB, scrape, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in the scrape:\n%s", name, scrape)
	return 0
}

// awaitReady waits for /readyz to answer 200 ok: just after the ready
// line, the proxy may still be loading its backend database's catalog.
func awaitReady(t testing.TB, addr string) {
	t.Helper()
	var code int
	var body string
	eventually(t, 30*time.Second, "/readyz answers 200", func() bool {
		code, body = get(t, addr, "/readyz")
		if code != 200 && code != http.StatusServiceUnavailable {
			t.Fatalf("GET /readyz: %d %q", code, body)
		}
		return code == 200 && body == "ok\n"
	})
}

// TestOpsMetrics: /metrics counts connections accepted, active and
// refused; /livez and /readyz answer 200 while the proxy serves.
func TestOpsMetrics(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0", "--max-connections", "2")
	addr := p.metricsAddr(t)
	ctx := testContext(t)

	if code, body := get(t, addr, "/livez"); code != 200 || body != "ok\n" {
		t.Fatalf("GET /livez: %d %q", code, body)
	}
	awaitReady(t, addr)
	_, before := get(t, addr, "/metrics")
	accepted0 := metricValue(t, before, "mzproxy_connections_accepted_total")
	for _, name := range []string{"mzproxy_connections_active", "mzproxy_connections_refused_total", "mzproxy_read_holds", "mzproxy_plan_cache_hits_total", "mzproxy_draining"} {
		metricValue(t, before, name) // present
	}

	for range 3 {
		conn, err := pgx.Connect(ctx, p.URL("postgres", "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	// The server counts a session ended a moment after the client left.
	eventually(t, 10*time.Second, "no session active", func() bool {
		_, m := get(t, addr, "/metrics")
		return metricValue(t, m, "mzproxy_connections_active") == 0
	})
	// Two sessions open fill --max-connections; a third is refused.
	a, b := p.connect(t, ctx), p.connect(t, ctx)
	_, _ = a.Exec(ctx, "SELECT 1")
	_, _ = b.Exec(ctx, "SELECT 1")
	if c, err := pgx.Connect(ctx, p.URL("postgres", "postgres")); err == nil {
		c.Close(ctx)
		t.Fatal("a third session was accepted with --max-connections 2")
	} else if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "53300" {
		t.Fatalf("third session: %v, want 53300", err)
	}

	_, after := get(t, addr, "/metrics")
	if got := metricValue(t, after, "mzproxy_connections_accepted_total"); got < accepted0+6 {
		t.Errorf("accepted went from %v to %v after 6 connections", accepted0, got)
	}
	if got := metricValue(t, after, "mzproxy_connections_active"); got != 2 {
		t.Errorf("active = %v with two sessions open", got)
	}
	if got := metricValue(t, after, "mzproxy_connections_refused_total"); got < 1 {
		t.Errorf("refused = %v after a refused session", got)
	}
	for _, unwanted := range []string{"SELECT", `user="`} {
		if strings.Contains(after, unwanted) {
			t.Errorf("the scrape contains %q (SQL text or user names in labels)", unwanted)
		}
	}
}

// TestOpsReadyzDrain: /readyz answers 503 while a SIGTERM drains a busy
// session (and /livez still 200), and the session's statement finishes.
func TestOpsReadyzDrain(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0", "--shutdown-timeout", "30s")
	addr := p.metricsAddr(t)
	ctx := testContext(t)
	awaitReady(t, addr)

	busy := p.connect(t, ctx)
	done := make(chan error, 1)
	go func() {
		var s string
		err := busy.QueryRow(ctx, "SELECT 'ops_drain' FROM pg_sleep(3)").Scan(&s)
		done <- err
	}()
	direct := connectDirect(t, ctx)
	eventually(t, 20*time.Second, "the busy query runs", func() bool {
		return sleepingQueries(t, ctx, direct, "'ops_drain'") == 1
	})

	p.signal(syscall.SIGTERM)
	eventually(t, 5*time.Second, "/readyz turns 503", func() bool {
		code, _ := get(t, addr, "/readyz")
		return code == http.StatusServiceUnavailable
	})
	if _, body := get(t, addr, "/readyz"); body != "draining\n" {
		t.Errorf("/readyz during drain: %q", body)
	}
	if code, _ := get(t, addr, "/livez"); code != 200 {
		t.Errorf("/livez during drain: %d", code)
	}
	if _, m := get(t, addr, "/metrics"); metricValue(t, m, "mzproxy_draining") != 1 {
		t.Errorf("mzproxy_draining is not 1 during drain")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the busy statement failed during drain: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the busy statement did not finish")
	}
	if !p.wait(20 * time.Second) {
		t.Fatal("mzproxy did not exit after the drain")
	}
}

// TestOpsReadyzBackendDown: /readyz is 503 when the backend is
// unreachable, /livez still 200.
func TestOpsReadyzBackendDown(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: the listener is closed before mzproxy
	// starts (it connects to the backend only per session).
	p := startProxy(t, "--metrics-listen", "127.0.0.1:0", "--backend", "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1")
	addr := p.metricsAddr(t)
	if code, body := get(t, addr, "/readyz"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "backend unreachable") {
		t.Errorf("GET /readyz with no backend: %d %q", code, body)
	}
	if code, _ := get(t, addr, "/livez"); code != 200 {
		t.Errorf("GET /livez: %d", code)
	}
}

// TestOpsSIGHUP: SIGHUP applies a changed log level from the config file
// without disturbing a session, reports other changes as ignored until
// restart, and keeps the running configuration when the file is bad.
func TestOpsSIGHUP(t *testing.T) {
	t.Parallel()
	cfgPath := filepath.Join(t.TempDir(), "mzproxy.toml")
	write := func(s string) {
		if err := os.WriteFile(cfgPath, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("log-level = \"info\"\nmax-connections = 50\nslow-statement-threshold = \"0s\"\nstatement-timeout = \"0s\"\n")
	// Not startProxy: it sets --log-level on the command line, which
	// would win over the file.
	p := startProxyArgs(t, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--backend", directURL("postgres", "postgres"), "--config", cfgPath)
	ctx := testContext(t)
	conn := p.connect(t, ctx)
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	// A connection closed before its startup packet is logged at debug.
	incomplete := func() {
		t.Helper()
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	incomplete()
	time.Sleep(200 * time.Millisecond)
	if strings.Contains(p.log.String(), "level=debug") {
		t.Fatalf("debug lines at log-level info:\n%s", p.log.String())
	}

	reload := func(n int) {
		t.Helper()
		p.signal(syscall.SIGHUP)
		eventually(t, 10*time.Second, "the reload is logged", func() bool {
			return strings.Count(p.log.String(), "SIGHUP: configuration") >= n
		})
	}
	if _, err := conn.Exec(ctx, "SELECT 'before_reload'"); err != nil {
		t.Fatal(err)
	}
	write("log-level = \"debug\"\nmax-connections = 10\nslow-statement-threshold = \"1ns\"\nstatement-timeout = \"300ms\"\n")
	reload(1)
	log := p.log.String()
	for _, want := range []string{
		`msg="SIGHUP: setting changed" new=debug old=info setting=log-level`,
		`msg="SIGHUP: setting changed" new=1ns old=0s setting=slow-statement-threshold`,
		`msg="SIGHUP: setting changed" new=300ms old=0s setting=statement-timeout`,
		`msg="SIGHUP: setting changed; ignored until restart" new=10 old=50 setting=max-connections`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	// The session goes on, and the proxy now logs at debug and every
	// statement as slow.
	if _, err := conn.Exec(ctx, "SELECT 2"); err != nil {
		t.Fatalf("session after SIGHUP: %v", err)
	}
	eventually(t, 10*time.Second, "the statement is logged as slow", func() bool {
		return strings.Contains(p.log.String(), `statement="SELECT 2"`)
	})
	if strings.Contains(p.log.String(), "before_reload") {
		t.Errorf("a statement was logged as slow with the threshold off")
	}
	// The session, open since before the reload, has the new default
	// statement timeout from its next statement on.
	var shown string
	if err := conn.QueryRow(ctx, "SHOW statement_timeout", pgx.QueryExecModeSimpleProtocol).Scan(&shown); err != nil || shown != "300ms" {
		t.Errorf("SHOW statement_timeout after SIGHUP: %q, %v", shown, err)
	}
	start := time.Now()
	var pe *pgconn.PgError
	// 30 s against a generous bound of 10 s: a loaded machine is slow to
	// cancel, and a statement not timed out cannot pass for one that was.
	if _, err := conn.Exec(ctx, "SELECT pg_sleep(30)"); !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("a 30s statement under the reloaded 300ms default: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the statement timed out after %v, want about 300ms", d)
	}
	incomplete()
	eventually(t, 10*time.Second, "debug lines appear", func() bool {
		return strings.Contains(p.log.String(), `level=debug msg="incomplete startup packet"`)
	})

	// A bad file changes nothing.
	write("log-level = \"loud\"\n")
	reload(2)
	if !strings.Contains(p.log.String(), "SIGHUP: configuration not reloaded") {
		t.Errorf("a bad config file was not reported:\n%s", p.log.String())
	}
	if _, err := conn.Exec(ctx, "SELECT 3"); err != nil {
		t.Fatalf("session after a failed reload: %v", err)
	}
}

// startProxyArgs starts mzproxy with exactly args (startProxy adds
// its own). It is stopped when the test ends.
func startProxyArgs(t testing.TB, args ...string) *proxyProc {
	t.Helper()
	return launchProxy(t, nil, args)
}

// TestOpsDefaultMetricsAddrInUse: when the default metrics address is
// taken (another mzproxy on the machine), mzproxy still starts, without
// its HTTP server, and says so; an address given explicitly must be free.
func TestOpsDefaultMetricsAddrInUse(t *testing.T) {
	t.Parallel()
	// Hold the address, unless another process (another mzproxy) does.
	l, err := net.Listen("tcp", "127.0.0.1:6876")
	if err == nil {
		defer l.Close()
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Skipf("cannot hold the default metrics address: %v", err)
	}
	// Not startProxy: it turns the metrics listener off.
	p := startProxyArgs(t, "--listen", "127.0.0.1:0", "--backend", directURL("postgres", "postgres"))
	log := p.log.String()
	if err != nil && metricsLine.MatchString(log) {
		t.Skip("the other process let go of the default metrics address meanwhile")
	}
	if !strings.Contains(log, "the default metrics-listen address is in use") || metricsLine.MatchString(log) {
		t.Errorf("no warning, or a metrics address, with the default address taken:\n%s", log)
	}

	cmd := exec.Command(env.binary, "--listen", "127.0.0.1:0", "--backend", directURL("postgres", "postgres"), "--metrics-listen", "127.0.0.1:6876")
	tieToTest(cmd)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "metrics-listen:") {
		t.Errorf("an explicit metrics address in use: %v\n%s", err, out)
	}
}

// TestOpsReadyzStartup: while mzproxy starts its embedded PostgreSQL,
// /livez answers 200 and /readyz 503; once it serves, /readyz is 200 (the
// backend answers and the catalog of its database is loaded).
func TestOpsReadyzStartup(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// Under the directory the test PostgreSQL runs in, whose ancestors the
	// postgres user can search.
	dataDir, err := os.MkdirTemp(env.dir, "readyz-startup-")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyProc{log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(env.binary, "--listen", "127.0.0.1:0", "--metrics-listen", addr, "--data-dir", dataDir, "--log-level", "debug")
	tieToTest(p.cmd)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("mzproxy log:\n%s", p.log.String())
		}
	})

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	probe := func(path string) (int, string) {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var starting, live bool
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not turn 200 within 60s (seen starting: %v)", starting)
		}
		select {
		case <-p.done:
			t.Fatalf("mzproxy exited: %v", p.err)
		default:
		}
		code, body := probe("/readyz")
		if code == http.StatusServiceUnavailable && body == "starting\n" {
			starting = true
			if c, _ := probe("/livez"); c == 200 {
				live = true
			}
		}
		if code == 200 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !starting || !live {
		t.Errorf("during startup: /readyz said starting: %v, /livez 200: %v", starting, live)
	}
	if !strings.Contains(p.log.String(), "mzproxy ready") {
		t.Errorf("/readyz 200 before the ready line:\n%s", p.log.String())
	}
}

// serverCertSerial does an SSLRequest and a TLS handshake with the proxy
// and returns the serial number of the certificate it offers.
func serverCertSerial(t *testing.T, addr string) string {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	// SSLRequest: length 8, code 80877103.
	if _, err := nc.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 1)
	if _, err := io.ReadFull(nc, answer); err != nil || answer[0] != 'S' {
		t.Fatalf("SSLRequest answered %q, %v", answer, err)
	}
	tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestOpsSIGHUPTLS: SIGHUP loads the TLS certificate again from its files:
// new connections get the renewed one, an encrypted session goes on.
func TestOpsSIGHUPTLS(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	certFile, keyFile := selfSignedCert(t)
	p := startProxy(t, "--tls-cert", certFile, "--tls-key", keyFile)
	first := serverCertSerial(t, p.addr)
	conn, err := pgx.Connect(ctx, strings.Replace(p.URL("postgres", "postgres"), "sslmode=disable", "sslmode=require", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	renewedCert, renewedKey := selfSignedCert(t)
	for from, to := range map[string]string{renewedCert: certFile, renewedKey: keyFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the certificate is reloaded", func() bool {
		return strings.Contains(p.log.String(), "SIGHUP: TLS certificate reloaded")
	})
	if second := serverCertSerial(t, p.addr); second == first {
		t.Errorf("after SIGHUP the proxy still offers certificate %s", first)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("the TLS session after SIGHUP: %v", err)
	}

	// A broken file keeps the loaded certificate.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	renewed := serverCertSerial(t, p.addr)
	p.signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the failed reload is logged", func() bool {
		return strings.Contains(p.log.String(), "SIGHUP: TLS certificate not reloaded")
	})
	if got := serverCertSerial(t, p.addr); got != renewed {
		t.Errorf("a broken certificate file changed the certificate offered: %s, want %s", got, renewed)
	}
}
