package store

import (
	"errors"
	"fmt"
)

// ErrUnsupported reports an operation a store cannot do under the
// algorithm it was configured with (memstore under a window algorithm
// refunds, reserves and grants nothing in part), or that a caller refuses
// by design (a shadow limiter's Reserve). Nothing was charged. It matches
// errors.ErrUnsupported, as algo.ErrQuotaUnsupported (an operation a
// calendar quota cannot do, on every store) does.
var ErrUnsupported = fmt.Errorf("store: operation not supported: %w", errors.ErrUnsupported)
