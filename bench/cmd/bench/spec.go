package main

import (
	"fmt"
	"time"
)

// Implementations a run can measure.
const (
	implVantage = "vantage"
	implRaw     = "raw"
	implRiver   = "river"
)

// Scenarios.
const (
	scenarioCatchup  = "catchup"
	scenarioLive     = "live"
	scenarioFailover = "failover"
	scenarioIdle     = "idle"
	scenarioRamp     = "ramp"
	scenarioSoak     = "soak"
	scenarioRebuild  = "rebuild"
)

// Engine settings of the live, failover and idle scenarios. settingNoEngine
// is a live run without the engine: the appends alone, the floor under the
// latency of the other settings on the same machine.
const (
	settingDefaults   = "defaults"
	settingLowLatency = "low-latency"
	settingNoEngine   = "no-engine"
)

// spec is one measured run, executed in a child process of its own so that
// its peak RSS is its own.
type spec struct {
	Scenario     string        `json:"scenario"`
	Impl         string        `json:"impl"`
	Backend      string        `json:"backend"`
	Setting      string        `json:"setting,omitempty"`
	Database     string        `json:"database,omitempty"`
	Schema       string        `json:"schema,omitempty"`
	Events       int           `json:"events"`
	Streams      int           `json:"streams"`
	Perspectives int           `json:"perspectives"`
	Instances    int           `json:"instances"`
	Rate         int           `json:"rate,omitempty"`
	Duration     time.Duration `json:"duration,omitempty"`
	Warmup       time.Duration `json:"warmup,omitempty"`
	Pool         int           `json:"pool"`
	Workers      int           `json:"workers,omitempty"`
	// RiverDefaults runs River with its default fetch cadence.
	RiverDefaults bool          `json:"river_defaults,omitempty"`
	AppendBatch   int           `json:"append_batch"`
	Appenders     int           `json:"appenders"`
	Stale         time.Duration `json:"stale,omitempty"`
	KillAfter     time.Duration `json:"kill_after,omitempty"`
	DrainWait     time.Duration `json:"drain_wait,omitempty"`
	Timeout       time.Duration `json:"timeout"`
	ProfileDir    string        `json:"profile_dir,omitempty"`
	PGLog         string        `json:"pg_log,omitempty"`
	// Options override core.Options fields by name (-opt).
	Options map[string]string `json:"options,omitempty"`
	// Ramp is the plan of a ramp run.
	Ramp *rampSpec `json:"ramp,omitempty"`

	// SoakSample is the soak's sample interval.
	SoakSample time.Duration `json:"soak_sample,omitempty"`
	// Sample is how often the rebuild scenario reads its request's
	// progress.
	Sample time.Duration `json:"sample,omitempty"`
}

// name is a short identifier of the run for progress lines and files.
func (s spec) name() string {
	n := fmt.Sprintf("%s-%s-%s-i%d-e%d-p%d", s.Scenario, s.Impl, s.Backend, s.Instances, s.Events, s.Perspectives)
	if s.Rate > 0 {
		n += fmt.Sprintf("-r%d", s.Rate)
	}
	if s.Setting != "" {
		n += "-" + s.Setting
	}
	return n
}

// result is one line of the output. Figures that do not apply are omitted
// from the JSON.
type result struct {
	Scenario     string  `json:"scenario"`
	Backend      string  `json:"backend"`
	Impl         string  `json:"impl"`
	Setting      string  `json:"setting,omitempty"`
	Events       int64   `json:"events"`
	WorkRows     int64   `json:"work_rows"`
	Streams      int     `json:"streams"`
	Perspectives int     `json:"perspectives"`
	Instances    int     `json:"instances"`
	Seconds      float64 `json:"seconds"`
	EventsPerS   float64 `json:"events_per_s"`
	WorkRowsPerS float64 `json:"work_rows_per_s"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	// AppendP50Ms and AppendP99Ms: how long the live scenario's Append calls
	// took, the part of the latency spent before the event is committed.
	AppendP50Ms float64 `json:"append_p50_ms,omitempty"`
	AppendP99Ms float64 `json:"append_p99_ms,omitempty"`
	PeakRSSMB   float64 `json:"peak_rss_mb"`

	// Comparisons, on Vantage's PostgreSQL catch-up lines.
	RiverJobsPerS float64 `json:"river_jobs_per_s,omitempty"`
	RawEventsPerS float64 `json:"raw_events_per_s,omitempty"`
	RatioVsRaw    float64 `json:"ratio_vs_raw,omitempty"`
	RatioVsRiver  float64 `json:"ratio_vs_river,omitempty"`

	// Where the CPU went during the measured phase.
	GoCPUSeconds float64 `json:"go_cpu_s,omitempty"`
	PGCPUSeconds float64 `json:"pg_cpu_s,omitempty"`
	// OtherCPUSeconds is the CPU the rest of the machine used during the
	// phase; MachineCPUPercent the machine's busy share of all its cores.
	OtherCPUSeconds   float64 `json:"other_cpu_s"`
	MachineCPUPercent float64 `json:"machine_cpu_pct"`

	// Live: the CPU of the process and of its PostgreSQL backends over the
	// measured phase, per event appended in it (warm-up included, as the
	// phase's CPU is); and, with an engine, its ratio to the no-engine line
	// of the same rate (compareLive). Rebuild: the same per event replayed.
	CPUMsPerEvent float64 `json:"cpu_ms_per_event,omitempty"`
	CPUVsAppends  float64 `json:"cpu_vs_appends,omitempty"`
	// Live on PostgreSQL: the rows each table of the run's schema wrote
	// over the measured phase (phase.writes), and their sum per event.
	TableWrites       map[string]rowWrites `json:"table_writes,omitempty"`
	RowWritesPerEvent float64              `json:"row_writes_per_event,omitempty"`

	// Seeding (appends before a catch-up; not part of Seconds).
	SeedSeconds    float64 `json:"seed_s,omitempty"`
	SeedEventsPerS float64 `json:"seed_events_per_s,omitempty"`

	// Live and failover: the rate asked and reached, and the target.
	Rate         int     `json:"rate,omitempty"`
	AchievedRate float64 `json:"achieved_rate,omitempty"`
	Samples      int     `json:"samples,omitempty"`
	TargetMs     float64 `json:"target_ms,omitempty"`

	// Failover.
	VictimStreams          int     `json:"victim_streams,omitempty"`
	RecoveryMaxMs          float64 `json:"recovery_max_ms,omitempty"`
	RecoveryP50Ms          float64 `json:"recovery_p50_ms,omitempty"`
	RecoveryFromLastBeatMs float64 `json:"recovery_from_last_heartbeat_ms,omitempty"`
	NotRecovered           int     `json:"not_recovered,omitempty"`

	// Correctness, checked on the stored models afterwards.
	Skipped       int64 `json:"skipped"`
	DoubleApplied int64 `json:"double_applied"`
	PendingAfter  int64 `json:"pending_after"`
	Checked       bool  `json:"checked"`

	// Raw pipeline: claimed rows deferred behind another worker's rows.
	Deferred int64 `json:"deferred,omitempty"`

	Idle *idleFigures `json:"idle,omitempty"`
	Ramp *rampFigures `json:"ramp,omitempty"`

	// Soak: every sample and the verdicts.
	Soak *soakFigures `json:"soak,omitempty"`
	// Rebuild: the catch-up before it, its progress and its check.
	Rebuild *rebuildFigures `json:"rebuild,omitempty"`

	Error string `json:"error,omitempty"`
}

// idleFigures are what an instance with nothing to do costs, per minute of
// the measured window (seconds).
type idleFigures struct {
	// GoCPUSPerMin is the CPU time of the process, PGCPUSPerMin that of the
	// instance's PostgreSQL backends, CPUSPerMin their sum, in seconds.
	GoCPUSPerMin float64 `json:"go_cpu_s_per_min"`
	PGCPUSPerMin float64 `json:"pg_cpu_s_per_min"`
	CPUSPerMin   float64 `json:"cpu_s_per_min"`
	// Statements counts the statements the instance's connections sent,
	// inside batches or not; Pings the liveness pings its pools sent
	// before handing out a connection idle for more than a second.
	Statements       int64   `json:"statements"`
	StatementsPerMin float64 `json:"statements_per_min"`
	Pings            int64   `json:"pings"`
	PingsPerMin      float64 `json:"pings_per_min"`
}

func newResult(s spec) *result {
	return &result{
		Scenario: s.Scenario, Backend: s.Backend, Impl: s.Impl, Setting: s.Setting,
		Streams: s.Streams, Perspectives: s.Perspectives, Instances: s.Instances, Rate: s.Rate,
	}
}

// finish fills the rates from the counts and the seconds, and the live,
// ramp and rebuild scenarios' figures per event.
func (r *result) finish() {
	if r.Seconds > 0 {
		r.EventsPerS = float64(r.Events) / r.Seconds
		r.WorkRowsPerS = float64(r.WorkRows) / r.Seconds
	}
	switch r.Scenario {
	case scenarioLive, scenarioRamp:
		r.RowWritesPerEvent = rowWritesPerEvent(r.TableWrites, r.Events)
		fallthrough
	case scenarioRebuild:
		r.CPUMsPerEvent = cpuMsPerEvent(r.GoCPUSeconds, r.PGCPUSeconds, r.Events)
	}
}
