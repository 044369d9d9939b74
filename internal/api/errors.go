package api

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// errCode is the Kafka error code for err: a *kerr.Error (possibly
// wrapped) keeps its code, anything else is an internal failure the client
// may retry.
func errCode(err error) int16 {
	if err == nil {
		return 0
	}
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}

// strp returns a pointer to s, for kmsg's optional string fields.
func strp(s string) *string { return &s }

// errMessage is the message of a Kafka error for the ErrorMessage fields.
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	return strp(err.Error())
}
