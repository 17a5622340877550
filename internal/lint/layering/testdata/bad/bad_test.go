package bad

import "time"

// Test files may read the clock; the check ignores them.
var _ = time.Now
