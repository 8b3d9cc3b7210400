package rdb

// CompositeSource is the source of the composite over the scripts c has
// learned, for a test that loads it on some nodes only.
func (c *Composer) CompositeSource() string {
	c.composite()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.src
}
