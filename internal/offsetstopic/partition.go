package offsetstopic

import "unicode/utf16"

// PartitionFor returns the __consumer_offsets partition of a group, as
// Kafka computes it: Utils.abs(groupId.hashCode()) % partitions, where
// hashCode is Java's String.hashCode over the id's UTF-16 code units (a
// character outside the Basic Multilingual Plane counts as its two
// surrogates) and Utils.abs(n) is n & 0x7fffffff, so that a hash of
// Integer.MIN_VALUE maps to partition 0 rather than to a negative one.
//
// A group id that is valid UTF-8 (every id a Java client can send) maps
// exactly as in Kafka. Kafka decodes an id's bytes with Java's UTF-8
// decoder, which replaces malformed input with U+FFFD; PartitionFor
// replaces each byte Go cannot decode with one U+FFFD, which is what Java
// does for a stray byte but not for every malformed sequence (Java
// replaces a truncated multi-byte sequence or an encoded surrogate with a
// single U+FFFD). Such ids still map deterministically.
//
// partitions must be positive; it is --offsets-topic-partitions, checked
// when the configuration is read.
func PartitionFor(groupID string, partitions int) int32 {
	if partitions <= 0 {
		panic("offsetstopic: partitions must be positive")
	}
	return int32(int64(javaHashCode(groupID)&0x7fffffff) % int64(partitions))
}

// javaHashCode is Java's String.hashCode of s: s[0]*31^(n-1) + ... + s[n-1]
// over UTF-16 code units, in int32 arithmetic that wraps.
func javaHashCode(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			h = 31*h + hi
			h = 31*h + lo
			continue
		}
		h = 31*h + r
	}
	return h
}
