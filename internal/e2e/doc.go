// Package e2e holds groupd's end-to-end tests: a server started in the test
// process on 127.0.0.1:0 and driven over real TCP by unmodified Kafka
// clients (franz-go, sarama) and by raw Kafka frames.
package e2e
