package mcptools

// WaitSessionEnded waits until the client's current session (if any) has
// ended as the SDK sees it: its connection was closed or broke. Tests use it
// instead of sleeping when the server closed the session under the client.
func WaitSessionEnded(c *Client) {
	c.mu.Lock()
	s := c.session
	c.mu.Unlock()
	if s != nil {
		_ = s.Wait()
	}
}
