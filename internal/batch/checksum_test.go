package batch

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestChecksum checks the chunked checksum against hash/crc32 at sizes
// around its chunk boundaries.
func TestChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	buf := make([]byte, 5*crcChunk+100)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, 63, 64, crcChunk - 1, crcChunk, 2*crcChunk - 1, 2 * crcChunk, 2*crcChunk + 1, 3*crcChunk + 17, len(buf)} {
		for _, off := range []int{0, 1, 7} {
			if n+off > len(buf) {
				continue
			}
			b := buf[off : off+n]
			if got, want := checksum(b), crc32.Checksum(b, castagnoli); got != want {
				t.Fatalf("%d bytes at %d: checksum %08x, want %08x", n, off, got, want)
			}
		}
	}
}

// BenchmarkChecksum sums megabyte inputs in the cache (hot) and, from a
// working set larger than the caches, out of it (cold), as produced
// batches mostly are, with checksum and with hash/crc32 alone.
func BenchmarkChecksum(b *testing.B) {
	const size = 1 << 20
	for _, cold := range []bool{false, true} {
		sets := 1
		if cold {
			sets = 384 // 384 MiB
		}
		bufs := make([][]byte, sets)
		for i := range bufs {
			bufs[i] = make([]byte, size)
			for j := range bufs[i] {
				bufs[i][j] = byte(j * 7)
			}
		}
		name := map[bool]string{false: "hot", true: "cold"}[cold]
		b.Run(name+"/checksum", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				checksum(bufs[i%sets])
			}
		})
		b.Run(name+"/crc32", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				crc32.Checksum(bufs[i%sets], castagnoli)
			}
		})
	}
}
