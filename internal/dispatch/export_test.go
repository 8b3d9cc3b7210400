package dispatch

// AccountResolutions counts the WeCom accounts the dispatcher resolved:
// one per job (accounts.resolve).
func (d *Dispatcher) AccountResolutions() int64 { return d.accounts.resolved.Load() }
