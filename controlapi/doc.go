// Package controlapi holds the request and reply types of holdfast's
// control API (/control/..., docs/PROTOCOL.md "Control API"), defined
// once: holdfast server, the reference server (holdfasttest), the etcd
// source's audit queries and the holdfast command all speak them.
package controlapi
