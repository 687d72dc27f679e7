package bench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuantileInterpolatesWithinTheBucket(t *testing.T) {
	bounds := []float64{0.01, 0.1, 1, math.Inf(1)}
	// 10 observations under 10 ms, 80 between 10 and 100 ms, 10 between 100 ms and 1 s
	cum := map[float64]uint64{0.01: 10, 0.1: 90, 1: 100, math.Inf(1): 100}
	require.InDelta(t, 0.01+0.09*40.0/80, quantile(0.5, 100, bounds, cum), 1e-9)
	require.InDelta(t, 0.1+0.9*5.0/10, quantile(0.95, 100, bounds, cum), 1e-9)
	// beyond the last finite bound: the bound is all the histogram says
	cum = map[float64]uint64{0.01: 10, 0.1: 90, 1: 90, math.Inf(1): 100}
	require.Equal(t, 1.0, quantile(0.95, 100, bounds, cum))
}

func TestRatiosAgainstBaselineAndOriginal(t *testing.T) {
	ours := &Result{Scenario: "burst-500", Hosts: 500, Configured: 500, HostsPerSecond: 20, ProvisionerCPUMsPerHost: 15, TemporalCPUMsPerHost: 50, Kind: KindOurs}
	base := &Result{Scenario: "burst-500", Variant: "30d576c", Hosts: 500, Configured: 500, HostsPerSecond: 10, ProvisionerCPUMsPerHost: 40, TemporalCPUMsPerHost: 100, Kind: KindOurs}
	orig := &Result{Scenario: "burst-500", Variant: "Choria Provisioner", Hosts: 500, Configured: 500, HostsPerSecond: 25, ProvisionerCPUMsPerHost: 30, Kind: KindOriginal}
	r, ok := Ratio("provisioner CPU/host", ours, base)
	require.True(t, ok)
	require.InDelta(t, 0.375, r, 1e-9)
	r, ok = Ratio("hosts/s", ours, orig)
	require.True(t, ok)
	require.InDelta(t, 0.8, r, 1e-9)
	_, ok = Ratio("Temporal CPU/host", ours, orig)
	require.False(t, ok, "the Choria Provisioner has no Temporal")
	table := Ratios([]Comparison{{Scenario: "burst-500", Ours: ours, Baseline: base, Original: orig}})
	require.Contains(t, table, "| provisioner CPU/host | 15.0 ms | 40.0 ms | **0.38×** | 30.0 ms | **0.50×** |")
	require.True(t, strings.Contains(table, "| Temporal CPU/host | 50.0 ms | 100.0 ms | **0.50×** | – | – |"), table)
}

func TestRoundsGiveMediansAndTheRatiosRange(t *testing.T) {
	var rounds []Comparison
	for i, v := range []struct{ ours, base, orig float64 }{{40, 60, 0}, {50, 100, 0}, {45, 50, 0}} {
		n := i + 1
		rounds = append(rounds, Comparison{Scenario: "burst-500",
			Ours:     &Result{Scenario: "burst-500", Variant: RoundVariant("", n, 3), Hosts: 500, TemporalCPUMsPerHost: v.ours, HostsPerSecond: float64(20 + n), Kind: KindOurs},
			Baseline: &Result{Scenario: "burst-500", Variant: RoundVariant("30d576c", n, 3), Hosts: 500, TemporalCPUMsPerHost: v.base, HostsPerSecond: 10, Kind: KindOurs},
			Original: &Result{Scenario: "burst-500", Variant: RoundVariant("Choria Provisioner", n, 3), Hosts: 500, HostsPerSecond: 30, Kind: KindOriginal}})
	}
	require.Equal(t, "30d576c round 2", rounds[1].Baseline.Variant)
	require.Equal(t, "30d576c", RoundVariant("30d576c", 1, 1), "one round: the variant as given")
	table := Rounds(rounds)
	require.Contains(t, table, "medians of 3 rounds")
	require.Contains(t, table, "| metric | this build | 30d576c | this / 30d576c | Choria Provisioner | this / Choria Provisioner |")
	// ratios 0.67, 0.50, 0.90: median 0.67, range 0.50–0.90; each build's value its own median
	require.Contains(t, table, "| Temporal CPU/host | 45.0 ms | 60.0 ms | **0.67×** (0.50–0.90) | – | – |")
	require.Contains(t, table, "| hosts/s | 22 | 10 | **2.20×** (2.10–2.30) | 30 | **0.73×** (0.70–0.77) |")
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
}

func TestSaveStartsAMarkdownFileThatDoesNotExist(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "new.md")
	_, err := Save(filepath.Join(dir, "r.json"), md, []*Result{{Scenario: "burst-500", Hosts: 500, Configured: 500, HostsPerSecond: 12.5}})
	require.NoError(t, err)
	require.NoError(t, SaveRatios(md, "the ratios"))
	b, err := os.ReadFile(md)
	require.NoError(t, err)
	require.Contains(t, string(b), "| burst-500 | 500/500 | 12.50 |")
	require.Contains(t, string(b), RatioBeginMarker+"\nthe ratios\n"+RatioEndMarker)
}

func TestSaveLeavesAMarkdownFileWithoutTheMarkersAlone(t *testing.T) {
	dir := t.TempDir()
	md, js := filepath.Join(dir, "page.md"), filepath.Join(dir, "r.json")
	page := "# A page\n\n" + RatioBeginMarker + "\n" + RatioEndMarker + "\n"
	require.NoError(t, os.WriteFile(md, []byte(page), 0o644))
	all, err := Save(js, md, []*Result{{Scenario: "burst-500", Hosts: 500, Configured: 500, HostsPerSecond: 12.5}})
	require.NoError(t, err)
	require.Len(t, all, 1)
	b, err := os.ReadFile(md)
	require.NoError(t, err)
	require.Equal(t, page, string(b), "no per-run table where the page has no place for it")
	rs, err := Load(js)
	require.NoError(t, err)
	require.Equal(t, 12.5, rs[0].HostsPerSecond, "the run's row is in the JSON")
}
