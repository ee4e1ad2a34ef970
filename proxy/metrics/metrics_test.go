package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScrape(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	var n atomic.Int64
	p.Gauge("mzproxy.test.active", "{connection}", "Test gauge.", func() int64 { return 3 })
	p.Counter("mzproxy.test.accepted", "{connection}", "Test counter.", n.Load)
	p.FloatGauge("mzproxy.test.age", "s", "Test age.", func() float64 { return 1.5 })
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	n.Store(7)

	for _, want := range []string{
		"mzproxy_test_active 3\n",
		"mzproxy_test_accepted_total 7\n",
		"mzproxy_test_age_seconds 1.5\n",
		"# HELP mzproxy_test_active Test gauge.\n",
		"go_goroutines ",
		`target_info{service_name="mzproxy"`,
	} {
		if body := scrape(t, p); !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	n.Store(9)
	if body := scrape(t, p); !strings.Contains(body, "mzproxy_test_accepted_total 9\n") {
		t.Errorf("counter did not move:\n%s", body)
	}
}

func TestBadInstrument(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	p.Gauge("", "", "no name", func() int64 { return 0 })
	if p.Err() == nil {
		t.Fatal("an instrument without a name was accepted")
	}
}

func scrape(t *testing.T, p *Provider) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}
