package logging

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Fields of a summary line: how many events it stands for, over which interval.
const (
	FieldCount    = "count"
	FieldInterval = "interval"
)

// Summary logs events that an outsider can cause at will (refused tasks and payloads) without
// letting them flood the log: the first event of a reason in an interval is logged in full, and
// the others of that interval are one line with their count when it ends. Counters beside it
// stay exact; the log says that it happened, and what the first one was.
type Summary struct {
	log      *zap.Logger
	msg      string
	interval time.Duration
	mu       sync.Mutex
	open     map[string]int // reason -> events after the first in the current interval
}

// DefaultSummaryInterval is how often a Summary logs each reason at most.
const DefaultSummaryInterval = time.Minute

// NewSummary logs msg on log at most once per reason per interval (0: DefaultSummaryInterval).
func NewSummary(log *zap.Logger, msg string, interval time.Duration) *Summary {
	if interval <= 0 {
		interval = DefaultSummaryInterval
	}
	return &Summary{log: log, msg: msg, interval: interval, open: map[string]int{}}
}

// Warn records one event of reason: logged with fields when it is the first of its interval,
// counted into the interval's summary line otherwise.
func (s *Summary) Warn(reason string, fields ...zap.Field) {
	s.mu.Lock()
	n, inInterval := s.open[reason]
	if inInterval {
		s.open[reason] = n + 1
		s.mu.Unlock()
		return
	}
	s.open[reason] = 0
	s.mu.Unlock()
	s.log.Warn(s.msg, append([]zap.Field{zap.String(FieldReason, reason)}, fields...)...)
	// a timer, not a goroutine per reason: nothing runs between bursts
	time.AfterFunc(s.interval, func() { s.flush(reason) })
}

func (s *Summary) flush(reason string) {
	s.mu.Lock()
	n := s.open[reason]
	delete(s.open, reason)
	s.mu.Unlock()
	if n > 0 {
		s.log.Warn(s.msg+" (more, summarised)", zap.String(FieldReason, reason), zap.Int(FieldCount, n),
			zap.Duration(FieldInterval, s.interval))
	}
}
