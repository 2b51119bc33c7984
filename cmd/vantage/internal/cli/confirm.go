package cli

import (
	"bufio"
	"fmt"
	"strings"
)

// confirm asks the person at the terminal to confirm what question
// describes, unless yes (--yes) already did. It refuses (ExitRefused) when
// the answer is not yes, and when no person can answer: stdin is not a
// terminal and --yes was not given, as in a script or a pipeline.
func (a *app) confirm(yes bool, action, question string) error {
	if yes {
		return nil
	}
	if !a.env.Interactive {
		return refusedErrorf("%s needs a confirmation: pass --yes (stdin is not a terminal)", action)
	}
	fmt.Fprintf(a.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(a.env.Stdin).ReadString('\n') // end of input is a no
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return refusedErrorf("%s cancelled: not confirmed", action)
}
