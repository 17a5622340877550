// Command cmdok shows the doc form of a command the check accepts: it
// names the command, not package main.
package main

func main() {}
