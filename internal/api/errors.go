package api

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

type kerrError = kerr.Error

var unknownServerError = kerr.UnknownServerError.Code

func asKerr(err error, target **kerr.Error) bool { return errors.As(err, target) }

// strp returns a pointer to s, for kmsg's optional string fields.
func strp(s string) *string { return &s }

// errMessage is the message of a Kafka error for the ErrorMessage fields.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	return strp(err.Error())
}
