// Package portkeep keeps a TCP port for a server that is down, so that it
// can listen on it again: the reference server between Stop and Restart,
// a test's server or relay process between a kill and its restart.
//
// A port freed by a closed listener is the kernel's to give to any other
// listen on port 0 of the machine: here one took a given freed port 22
// times in 100,000, and the proxy suite's Restart once failed with
// "address already in use". A kept port is bound by a socket that does
// not listen: a dial of it is refused, as of a server that crashed; a
// listen on port 0 and an outgoing connection's choice of port pass over
// it; and an explicit listen on it with SO_REUSEADDR (as Go's, nginx's,
// HAProxy's and etcd's) still succeeds, so the server need not wait for
// the keeper to let go.
//
// That is Linux's behaviour. Elsewhere Keep keeps nothing, and Loopback
// returns a port free a moment ago, as listening and closing would.
package portkeep
