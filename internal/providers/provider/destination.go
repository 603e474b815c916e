package provider

import (
	"errors"
	"fmt"

	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/redact"
)

// ErrDestination is wrapped by the error of a call to a number the
// numbering plan refuses (phone.Parse): a premium-rate, shared-cost,
// personal or UAN number, or no number at all. The call fails for good.
var ErrDestination = errors.New("destination refused")

// CheckDestination refuses a number the numbering plan refuses
// (phone.Parse): a value stored before a check existed must not be
// dialled either. The error wraps ErrDestination and shows the number
// masked.
func CheckDestination(number string) error {
	if _, err := phone.Parse(number); err != nil {
		return fmt.Errorf("%w: %s", ErrDestination, redact.Text(err.Error()))
	}
	return nil
}
