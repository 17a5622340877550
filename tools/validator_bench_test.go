package tools

import (
	"encoding/json"
	"testing"
)

type benchItem struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type benchOrder struct {
	ID       string                        `json:"id"`
	Ship     struct{ Street, City string } `json:"ship"`
	Items    []benchItem                   `json:"items"`
	Currency string                        `json:"currency" enum:"EUR,USD"`
	Priority string                        `json:"priority" enum:"low,high"`
	Rush     *bool                         `json:"rush"`
	Tags     []string                      `json:"tags,omitempty" enum:"gift,fragile"`
}

const (
	benchArgsInternal = `{"id":"o-1","ship":{"Street":"Main 1","City":"Oslo"},"items":[{"sku":"a","quantity":2},{"sku":"b","quantity":1}],"currency":"EUR","priority":"low","rush":null,"tags":["gift"]}`
	benchArgsRefused  = `{"id":7,"ship":{"Street":"Main 1","City":"Oslo","Zip":"1"},"items":[{"sku":"a","quantity":2.5}],"currency":"GBP","priority":"low","rush":null}`
)

// BenchmarkValidators measures validating typical arguments (docs/adr/0022):
// the validator alone on a parsed value, the whole Normalize path (parse,
// validate, decode, compact) on valid and on refused arguments (the
// deterministic choice of the detail), and the body's one decode.
func BenchmarkValidators(b *testing.B) {
	c := CodecFor[benchOrder]()
	if c.Err() != nil {
		b.Fatal(c.Err())
	}
	data := []byte(benchArgsInternal)
	b.Run("jsonschema-go", func(b *testing.B) {
		b.ReportAllocs()
		var plain any
		if err := json.Unmarshal(data, &plain); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := c.valid.validate(plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("normalize", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := c.Normalize(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("normalize-refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := c.Normalize([]byte(benchArgsRefused)); err == nil {
				b.Fatal("accepted")
			}
		}
	})
	b.Run("decode-validated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.decodeValidated(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
