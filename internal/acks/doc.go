// Package acks reports what clients applied and rejected (acks and
// nacks) to the config plane, coalesced and spread over a short window,
// off the apply path: the SDK's Client reports its own through a Queue,
// a relay forwards its clients' through one.
package acks
