package telemetry

import "time"

// SetClock replaces the clock that sums the fail-closed time of probes
// without FailedClosedTimer.
func SetClock(in *Instruments, now func() time.Time) { in.now = now }
