// Package console holds the browser tests of Weft's operator console
// (github.com/weftrun/weft/console): they drive its pages in headless
// Chromium with chromedp, what a person does with what a person sees
// (docs/console.md). It has no code besides its tests. It is in the test
// module e2e/ui, so that chromedp is not in the module graph of an
// application importing Weft (docs/adr/0038).
package console
