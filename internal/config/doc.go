// Package config is the one place each msgpulse program reads its
// environment: every variable, its default, its validation and its help
// text (printed by -h) are declared here, per program, on top of the
// settings they share.
//
// Loading never exits and never connects to anything; a program's main
// prints the first error (which names the variable) and exits 2.
package config
