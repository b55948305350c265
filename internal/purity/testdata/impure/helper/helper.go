// Package helper breaks purity three ways.
package helper

import (
	"net/http"
	clock "time"
)

// Status returns a status, having read the clock and started a goroutine.
func Status() int {
	_ = clock.Now()
	go func() {}()
	_ = clock.Duration(5) // arithmetic: pure
	return http.StatusOK
}
