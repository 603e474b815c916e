module github.com/ivrsched/ivrsched/bench

go 1.26.0

require github.com/ivrsched/ivrsched v0.0.0

replace github.com/ivrsched/ivrsched => ../
