# frozen_string_literal: true

namespace :spec do
  desc "Run the heap-shapes spec on seeds 1..N (default 200): each shape dumped and walked by gdb in a core"
  task :shapes, [:count] => :compile do |_t, args|
    env = { "SHAPES" => (args[:count] || "200").to_s }
    sh env, "bundle", "exec", "rspec", "spec/heap_shapes_spec.rb"
  end
end
