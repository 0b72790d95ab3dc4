// Package browsertest drives the console (package console) in a real
// Chromium with chromedp: a module of its own, so that the core module
// does not depend on chromedp. See docs/CONSOLE.md.
package browsertest
