package bench

// Bracketed is this build's result for a comparison when it ran both before and after the
// others in one invocation: the machine's speed drifts within an invocation (a run after
// another cost ~10 % less CPU per host on the same code, the broker's included), and a build
// always run first is judged on the slower side of that drift. Rates, latencies and CPU are the
// two runs' means; peak memory, configured twice and runs per host the worse of the two;
// configured hosts the fewer.
func Bracketed(before, after *Result) *Result {
	r := *before
	mean := func(a, b float64) float64 { return (a + b) / 2 }
	r.Configured, r.Restarted = min(before.Configured, after.Configured), min(before.Restarted, after.Restarted)
	r.ConfiguredTwice = max(before.ConfiguredTwice, after.ConfiguredTwice)
	r.Seconds, r.HostsPerSecond = mean(before.Seconds, after.Seconds), round(mean(before.HostsPerSecond, after.HostsPerSecond), 2)
	r.ToConfiguredMs = meanPercentiles(before.ToConfiguredMs, after.ToConfiguredMs)
	r.ToRestartedMs = meanPercentiles(before.ToRestartedMs, after.ToRestartedMs)
	if before.RecoveryMs != nil && after.RecoveryMs != nil {
		p := meanPercentiles(*before.RecoveryMs, *after.RecoveryMs)
		r.RecoveryMs = &p
	}
	r.ProvisionerCPUMsPerHost = round(mean(before.ProvisionerCPUMsPerHost, after.ProvisionerCPUMsPerHost), 1)
	r.TemporalCPUMsPerHost = round(mean(before.TemporalCPUMsPerHost, after.TemporalCPUMsPerHost), 1)
	r.BrokerCPUMsPerHost = round(mean(before.BrokerCPUMsPerHost, after.BrokerCPUMsPerHost), 1)
	r.SimulatorCPUMsPerHost = round(mean(before.SimulatorCPUMsPerHost, after.SimulatorCPUMsPerHost), 1)
	r.ProvisionerPeakRSSMiB = max(before.ProvisionerPeakRSSMiB, after.ProvisionerPeakRSSMiB)
	r.BrokerPeakRSSMiB = max(before.BrokerPeakRSSMiB, after.BrokerPeakRSSMiB)
	r.TemporalPeakRSSMiB = max(before.TemporalPeakRSSMiB, after.TemporalPeakRSSMiB)
	r.SimulatorPeakRSSMiB = max(before.SimulatorPeakRSSMiB, after.SimulatorPeakRSSMiB)
	r.HistoryEventsPerHost = round(mean(before.HistoryEventsPerHost, after.HistoryEventsPerHost), 1)
	r.RunsPerHost = max(before.RunsPerHost, after.RunsPerHost)
	r.ActivityScheduleToStartMs = meanLatency(before.ActivityScheduleToStartMs, after.ActivityScheduleToStartMs)
	r.WorkflowTaskScheduleToStartMs = meanLatency(before.WorkflowTaskScheduleToStartMs, after.WorkflowTaskScheduleToStartMs)
	r.TemporalServerPerHost = meanSeries(before.TemporalServerPerHost, after.TemporalServerPerHost)
	return &r
}

// meanSeries is the mean of each series the two runs both read (nil when either read none).
func meanSeries(a, b map[string]float64) map[string]float64 {
	if a == nil || b == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range a {
		out[k] = round((v+b[k])/2, 2)
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out[k] = round(v/2, 2)
		}
	}
	return out
}

func meanPercentiles(a, b Percentiles) Percentiles {
	return Percentiles{P50: (a.P50 + b.P50) / 2, P95: (a.P95 + b.P95) / 2, P99: (a.P99 + b.P99) / 2, Max: max(a.Max, b.Max)}
}

func meanLatency(a, b *Latency) *Latency {
	if a == nil || b == nil {
		return nil
	}
	n := a.Count + b.Count
	if n == 0 {
		return &Latency{}
	}
	return &Latency{Count: n, Mean: (a.Mean*float64(a.Count) + b.Mean*float64(b.Count)) / float64(n), P95: (a.P95 + b.P95) / 2}
}
