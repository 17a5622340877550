package main

// nearest returns the candidate closest to name by edit distance (one
// insertion, deletion, substitution or swap of adjacent letters each),
// when it is close enough to be a typo of it — at most 2 edits, and
// fewer than half of name's letters — and "" otherwise. Ties go to the
// first candidate.
func nearest(name string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := editDistance(name, c)
		if d == 0 {
			return c
		}
		if d <= 2 && 2*d < len([]rune(name)) && (best == "" || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// didYouMean is "; did you mean X?" for nearest's X, or "".
func didYouMean(name string, candidates []string) string {
	if n := nearest(name, candidates); n != "" && n != name {
		return "; did you mean " + n + "?"
	}
	return ""
}

// editDistance is the optimal string alignment distance of a and b.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
