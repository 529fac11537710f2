# frozen_string_literal: true

desc "Fragment a heap, dump it and print the summary (tmp/demo)"
task demo: :compile do
  ruby "-Ilib", "examples/fragment.rb", "tmp/demo"
end
