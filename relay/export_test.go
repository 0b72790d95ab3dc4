package relay

// WithMaxPendingAcks bounds the outcomes the relay's ack queue holds
// waiting to go upstream: the tests' small bound (the default is 2^18).
func WithMaxPendingAcks(n int) Option {
	return optionFunc(func(o *options) { o.cache.MaxPendingAcks = n })
}
