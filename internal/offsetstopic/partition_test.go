package offsetstopic

import (
	"encoding/hex"
	"strings"
	"testing"
)

// TestPartitionForJava checks PartitionFor against Java: the hashes and
// partitions below were printed by testdata/PartitionFor.java (OpenJDK
// 17), which decodes each id's bytes as UTF-8 the way Kafka's protocol
// reader does and applies Kafka's Utils.abs(hashCode) % n:
//
//	javac PartitionFor.java && java PartitionFor <hex id>...
//
// They include non-ASCII ids, characters outside the BMP (two UTF-16
// units each), negative hashes (where Utils.abs differs from negation)
// and three ids whose hash is Integer.MIN_VALUE (where Math.abs would
// stay negative).
func TestPartitionForJava(t *testing.T) {
	for _, c := range []struct {
		hex     string
		hash    int32
		p50, p7 int32
	}{
		{"", 0, 0, 0},
		{"61", 97, 47, 6},                        // a
		{"67", 103, 3, 5},                        // g
		{"616263", 96354, 4, 6},                  // abc
		{"68656c6c6f", 99162322, 22, 0},          // hello
		{"6d792d67726f7570", -1906497762, 36, 1}, // my-group
		{"636f6e736f6c652d636f6e73756d65722d3132333435", 158455506, 6, 6}, // console-consumer-12345
		{"706f6c7967656e656c7562726963616e7473", -2147483648, 0, 0},       // polygenelubricants
		{"44455349474e494e4720574f524b484f55534553", -2147483648, 0, 0},   // DESIGNING WORKHOUSES
		{"4779645a475f", -2147483648, 0, 0},                               // GydZG_
		{"4772757070652dc39c626572", 501175141, 41, 5},                    // Gruppe-Über
		{"e697a5e69cace8aa9ee382b0e383abe383bce38397", -305235731, 17, 6}, // 日本語グループ
		{"656d6f6a692df09f9880", 1164511306, 6, 0},                        // emoji-😀
		{"f09d849e", 1772394, 44, 1},                                      // 𝄞 (U+1D11E)
		// Invalid UTF-8 where Go's decoding agrees with Java's: stray
		// bytes, each one U+FFFD.
		{"ff", 65533, 33, 6},
		{"61c3", 68540, 40, 3},
		{"6f6b80807a", 170707326, 26, 6},
	} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		id := string(b)
		if h := javaHashCode(id); h != c.hash {
			t.Errorf("%q: hash %d, Java %d", id, h, c.hash)
		}
		if p := PartitionFor(id, 50); p != c.p50 {
			t.Errorf("%q: partition %d of 50, Kafka %d", id, p, c.p50)
		}
		if p := PartitionFor(id, 7); p != c.p7 {
			t.Errorf("%q: partition %d of 7, Kafka %d", id, p, c.p7)
		}
	}
	// A long id, 1000 × "x", from Java as well: hash -1715418112,
	// partition 36 of 50, 0 of 7.
	long := strings.Repeat("x", 1000)
	if h, p50, p7 := javaHashCode(long), PartitionFor(long, 50), PartitionFor(long, 7); h != -1715418112 || p50 != 36 || p7 != 0 {
		t.Errorf("1000 x: hash %d, partitions %d %d; Java -1715418112, 36, 0", h, p50, p7)
	}
}

// TestPartitionForRange checks that every id lands in [0, partitions).
func TestPartitionForRange(t *testing.T) {
	for _, n := range []int{1, 2, 3, 50, 1000} {
		for _, id := range []string{"", "a", "polygenelubricants", "my-group", "\xff\xfe", "emoji-😀"} {
			if p := PartitionFor(id, n); p < 0 || int(p) >= n {
				t.Errorf("PartitionFor(%q, %d) = %d", id, n, p)
			}
		}
	}
}
