# frozen_string_literal: true

desc "Fragment a heap, dump it, print the summary and render the report (tmp/demo)"
task demo: :compile do
  ruby "-Ilib", "examples/fragment.rb", "tmp/demo"
  ruby "-Ilib", "exe/ptmalloc-visualize", "--force", "tmp/demo/demo.dump", "tmp/demo/report"
end
