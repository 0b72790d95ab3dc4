// Package scale holds fleet benchmarks: thousands of config clients of one
// namespace against one reference server, directly or behind one relay,
// split over child processes. They build only with the tag scale (see
// scale_test.go and relay_test.go):
//
//	go test -tags scale -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./internal/scale/
//	go test -tags scale -run '^$' -bench RelayStorm -benchtime 1x -timeout 30m ./internal/scale/
//	go test -tags scale -run '^$' -bench RelayWire -benchtime 1x -timeout 30m ./internal/scale/
//	go test -tags scale -run '^$' -bench LoopbackFloor -benchtime 1x ./internal/scale/
//
// LoopbackFloor is the floor under Fleet's server CPU: one raw TCP write
// per client per publish, and one ack read, with no HTTP, framing or JSON.
package scale
