# frozen_string_literal: true

desc "Benchmarks: dump vs a bare walk and malloc_info (1M chunks); BENCH_CHUNKS to change the size"
task bench: :compile do
  Dir.glob("bench/*_bench.rb").sort.each do |f|
    puts "== #{f}"
    ruby "-Ilib", f
  end
end
